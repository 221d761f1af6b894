"""The MCP host kit: how a tool is declared, checked, answered and bounded, for every tool and host.

It imports no domain module (a test keeps it so): registration and toolsets, schemas, argument checks,
the schema cache, results in their two forms, tool docs, the per-call deadline, confirmation of
deletions, jobs, untrusted-text marking, redaction and rooted file access. Submodules load on first use.
"""

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
