"""Jobs: long operations that outlive one tool call (zone sweeps, waits for ACTIVE, reconfigures,
benchmarks, long model answers): poll them, list them, cancel them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

import tpu_devops
from tpu_devops.host.toolsets import READ, WRITE_ONCE, Toolset
from tpu_devops.tools.args import SANE, JobId

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.host.jobs

toolset = Toolset("jobs", "poll, list and cancel long operations", default=True)
tool = toolset.tool
toolset.renamed("list_jobs", "get_job without job_id")


@tool(title="Get a job (or list them)", kind=READ, open_world=False)
def get_job(
    job_id: Annotated[
        str | None, Field(max_length=64, description="job_id; none: list all jobs"), SANE
    ] = None,
) -> tpu_devops.host.jobs.JobAnswer:
    """Poll a job by its job_id, or list all jobs.

    A long operation's state (running / succeeded / failed / cancelled), progress so far (a long model
    answer's text so far), and its result.
    Without job_id: every job this server process started, newest first."""
    return tpu_devops.host.jobs.job_answer(job_id)


# Kept in read-only mode: it only stops jobs this server started, and read-only mode still starts benchmarks.
@tool(title="Cancel a job", kind=WRITE_ONCE, open_world=False, keep_in_read_only=True)
async def cancel_job(job_id: JobId) -> tpu_devops.host.jobs.JobView:
    """Cancel a running job.

    Cancel a running job. A zone sweep stops and deletes the request it was waiting on (nothing is left
    queued); a TPU it already found ACTIVE stays (destroy_queued_resource tears it down)."""
    jobs = tpu_devops.host.jobs
    return jobs.JobView.of(await jobs.JOBS.cancel(job_id))
