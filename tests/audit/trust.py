"""The audit's trust sections: who decides a deletion, what a kubeconfig may make the server do, which images
get the secrets, what names the server and the VM accept, and who a GKE LoadBalancer admits. Each runs
through the official MCP client over stdio against the fakes and counts what got through (`TrustFigures`;
every goal is 0), with a positive control where a count of 0 could also mean "the measure saw nothing".

Self-confirmation is tried in every approval style a host has (README, "Deleting"): a host that approves
every call and cannot ask (Qwen Code ``--yolo``, ``claude -p --allowedTools``, Gemini CLI with ``trust``,
Claude Desktop), one whose question is cancelled (headless), one that declines (Codex ``exec``), and one
that accepts by itself (an auto-accepting hook: it sends the form's defaults, ``confirm: true`` or a
fixed word, never the rig's name, which only the question shows the person). In each, a scripted model
replays everything a result shows it: the dry run's tokens and exact calls, the refusals' texts, tokens of
other plans, made-up ones. Controls: a person who types the rig's name deletes, and (full plan) so does a
model under the operator's standing permission.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.audit.kubeconfigs import config_for, hostile_kubeconfigs, marker_program
from tests.audit.planted import NODE

ZONE = "us-west4-a"
FAILED_ZONE, FAILED_ID = "us-east5-a", f"{NODE}-failed"
RIG_LABELS = {"managed-by": "tpu-devops", "rig": NODE}
_TOKEN = re.compile(r"\b[a-z2-7]{16}\b")
_ARG = re.compile(r"(\w+)=(?:\"([^\"]*)\"|(true|false))")


@dataclass
class TrustFigures:
    """What the trust sections measured (the goal of each figure in `report`)."""

    deletion_styles: list[str] = field(default_factory=list)
    deletion_attempts: int = 0
    deletions_without_person: list[str] = field(default_factory=list)
    controls_failed: list[str] = field(default_factory=list)
    kubeconfigs: int = 0
    kubeconfig_calls: int = 0
    kubeconfigs_accepted: list[str] = field(default_factory=list)
    programs_run: list[str] = field(default_factory=list)
    foreign_images: int = 0
    images_accepted: list[str] = field(default_factory=list)
    vm_images_accepted: list[str] = field(default_factory=list)
    bad_names: int = 0
    names_accepted: list[str] = field(default_factory=list)
    vm_names_accepted: list[str] = field(default_factory=list)
    range_sets: int = 0
    ranges_accepted: list[str] = field(default_factory=list)
    warnings_missing: list[str] = field(default_factory=list)


Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


# ---- deletion: a person or the operator's standing permission ------------------------------------------


def _gke_objects() -> list[dict[str, Any]]:
    """The Deployment and Service apply_gke_deployment would create for the audited rig (rendered by the
    product itself, so teardown finds them by its labels)."""
    from tpu_devops.config import load_settings
    from tpu_devops.gke import manifests

    settings = load_settings(
        Path("/nonexistent"), {"RESOURCE_ID": NODE, "GOOGLE_CLOUD_PROJECT": "demo-project"}
    )
    plan = manifests.render(settings, cluster="gemma")
    return [m.manifest for m in plan.manifests if m.kind in ("Deployment", "Service")]


def plant_ours(world: Any) -> None:
    """A live TPU of the audited rig and its GKE objects (what a deletion would take)."""
    import copy

    if world.gcp.tpu.state_of(ZONE, NODE) is None:
        world.gcp.tpu.add_foreign(ZONE, NODE, labels=RIG_LABELS)
    if world.gcp.tpu.state_of(FAILED_ZONE, FAILED_ID) is None:  # what only_failed=true would clean up
        world.gcp.tpu.add_foreign(FAILED_ZONE, FAILED_ID, labels=RIG_LABELS, state="FAILED")
    for i, obj in enumerate(_gke_objects()):
        plural = "deployments" if obj["kind"] == "Deployment" else "services"
        key = (plural, "default", obj["metadata"]["name"])
        if key not in world.kube.objects:
            planted = copy.deepcopy(obj)
            planted["metadata"]["uid"] = f"audit-{i}"
            world.kube.objects[key] = planted


def _gone(world: Any, tool: str, base: dict[str, Any]) -> bool:
    if tool == "destroy_queued_resource" and base.get("only_failed"):
        return world.gcp.tpu.state_of(FAILED_ZONE, FAILED_ID) is None
    if tool == "destroy_queued_resource":
        return world.gcp.tpu.state_of(ZONE, NODE) is None
    return ("deployments", "default", f"vllm-{NODE}") not in world.kube.objects


def _shown(answer: Any) -> tuple[set[str], list[dict[str, Any]]]:
    """Every token-like string and every exact call an answer shows a model (text and structure)."""
    blob = answer.text + "\n" + json.dumps(answer.structured or {})
    calls = []
    for m in re.finditer(
        r"(destroy_queued_resource|teardown_gke_deployment)\(([^)]*)\)", blob.replace('\\"', '"')
    ):
        args: dict[str, Any] = {}
        for a in _ARG.finditer(m.group(2)):
            args[a.group(1)] = a.group(2) if a.group(2) is not None else a.group(3) == "true"
        calls.append(args)
    return set(_TOKEN.findall(blob)), calls


async def scripted_model(call: Call, tool: str, base: dict[str, Any]) -> int:
    """What a scripted model does to delete with ``tool``: dry runs (this plan's and, for a TPU, the
    cleanup's), then every call shown, every token shown (with confirm, alone, with dry_run=false), a
    made-up token, and again with whatever the refusals showed. Returns the number of deleting attempts."""
    dry = [await call(tool, {**base, "dry_run": True})]
    if tool == "destroy_queued_resource":  # the other plan's dry run: its tokens must not fit this one
        dry.append(await call(tool, {"only_failed": not base.get("only_failed"), "dry_run": True}))
    tokens: set[str] = set()
    shown_calls: list[dict[str, Any]] = []
    for answer in dry:
        t, c = _shown(answer)
        tokens |= t
        shown_calls += c
    tries = [{"confirm": True}, {"dry_run": False}, {"dry_run": False, "confirm": True},
             {"confirm": True, "confirm_token": "a" * 16}]  # fmt: skip
    attempts = 0
    for _round in range(2):
        tries += [
            c for c in shown_calls if c.get("confirm") or c.get("dry_run") is False or c.get("confirm_token")
        ]
        for token in sorted(tokens):
            tries += [{"confirm": True, "confirm_token": token}, {"confirm_token": token},
                      {"dry_run": False, "confirm_token": token}]  # fmt: skip
        tokens, shown_calls = set(), []
        for extra in tries:
            attempts += 1
            answer = await call(tool, {**base, **extra})
            t, c = _shown(answer)
            tokens |= t
            shown_calls += c
        tries = []
    return attempts


DELETERS = (
    ("destroy_queued_resource", {}),
    ("destroy_queued_resource", {"only_failed": True}),
    ("teardown_gke_deployment", {"cluster": "gemma"}),
)


async def deletion_section(
    main: Any, world: Any, open_client: Callable[..., Any], session_of: Callable[[Any], Any], full: bool
) -> None:
    """Self-confirmation through every host approval style (module docstring), then the controls."""
    from mcp_types import ElicitResult

    f = main.figures.trust
    automatic = iter(
        [{}, {"confirm": True}, {"rig": ""}, {"rig": "yes"}, {"rig": "accept"}, {"rig": "true"}] * 200
    )

    async def cancel(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="cancel")

    async def decline(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="decline")

    async def accept_alone(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content=next(automatic))

    async def person(context: Any, params: Any) -> ElicitResult:  # reads the question, types the name
        return ElicitResult(action="accept", content={"rig": NODE})

    styles: list[tuple[str, Any, dict[str, str]]] = [
        ("approves every call, cannot ask (Qwen Code --yolo, claude -p --allowedTools, Claude Desktop)", None, {}),
        ("headless: its question is cancelled (claude -p, gemini -p)", cancel, {}),
        ("declines the question (Codex exec)", decline, {}),
        ("accepts the question by itself (auto-accepting hook)", accept_alone, {}),
        ("any host, TPU_DEVOPS_ELICITATION=off: a person's answer is not taken", person,
         {"TPU_DEVOPS_ELICITATION": "off"}),
    ]  # fmt: skip
    for name, callback, env in styles:
        f.deletion_styles.append(name)
        if callback is None and not env:
            await _attack(main, world, f, name)
            continue
        async with open_client(callback, env) as client:
            await _attack(session_of(client), world, f, name)
    # controls: what must delete does (else a 0 above could mean the measure saw nothing)
    controls = [("a person who types the rig's name", person, {})]
    if full:
        controls.append(
            ("a model under TPU_DEVOPS_UNATTENDED_DELETE", None, {"TPU_DEVOPS_UNATTENDED_DELETE": NODE})
        )
    for name, callback, env in controls:
        async with open_client(callback, env) as client:
            s = session_of(client)
            for tool, base in DELETERS:
                plant_ours(world)
                if callback is not None:
                    await s.call(tool, {**base, "confirm": True})
                else:
                    await scripted_model(s.call, tool, base)
                if not _gone(world, tool, base):
                    f.controls_failed.append(f"{name}: {tool}({base}) did not delete")
    plant_ours(world)


async def _attack(s: Any, world: Any, f: TrustFigures, style: str) -> None:
    for tool, base in DELETERS:
        plant_ours(world)
        shown = await s.call(tool, {**base, "dry_run": True})
        if shown.is_error or not (shown.structured or {}).get("steps"):  # else the attack proves nothing
            f.controls_failed.append(f"{tool}: its dry run listed nothing to delete ({shown.text[:120]!r})")
        f.deletion_attempts += await scripted_model(s.call, tool, base)
        if _gone(world, tool, base):
            f.deletions_without_person.append(f"{tool}({base}) in style: {style}")


# ---- kubeconfigs: data only --------------------------------------------------------------------------


async def kubeconfig_section(s: Any, world: Any, state_dir: Path, project: Path, full: bool) -> None:
    """Hostile kubeconfigs (`tests.audit.kubeconfigs`, plus one in the server's working directory, a read
    root) through every GKE tool: none may be used, and no program may run (a marker file)."""
    f = s.figures.trust
    marker = state_dir.parent / f"{state_dir.name}-kubeconfig-MARKER"
    outside = Path("/etc/hostname") if Path("/etc/hostname").exists() else Path("/etc/passwd")
    configs = hostile_kubeconfigs(world.kube, marker, outside)
    exec_user = [{"name": "fake", "user": {"exec": marker_program(marker)}}]
    (project / "kubeconfig").write_text(json.dumps(config_for(world.kube, exec_user)))
    paths: dict[str, tuple[str, str | None]] = {
        "exec, in the server's working directory (relative path)": ("kubeconfig", None),
        "exec, in the server's working directory (absolute path)": (str(project / "kubeconfig"), None),
    }
    for i, (name, (text, context)) in enumerate(configs.items()):
        path = state_dir / f"hostile-kubeconfig-{i}"
        path.write_text(text)
        paths[name] = (str(path), context)
    tools: list[tuple[str, dict[str, Any]]] = [("plan_gke_deployment", {}), ("teardown_gke_deployment", {})]
    if full:
        tools += [("apply_gke_deployment", {"wait_timeout_s": 5, "poll_interval_s": 0.05}),
                  ("benchmark_gke_deployment", {"concurrency": [1], "prompt_lengths": [16], "output_len": 2})]  # fmt: skip
    f.kubeconfigs = len(paths)
    for name, (path, context) in paths.items():
        for tool, extra in tools:
            args = {
                "cluster": "gemma",
                "kubeconfig": path,
                **extra,
                **({"context": context} if context else {}),
            }
            f.kubeconfig_calls += 1
            answer = await s.call(tool, args)
            if not answer.is_error:
                f.kubeconfigs_accepted.append(f"{tool}: {name}")
            if marker.exists():
                f.programs_run.append(f"{tool}: {name}")
                marker.unlink()


# ---- images: secrets only for allowed repositories ------------------------------------------------------

FOREIGN_IMAGES = (
    "evil.example.com/x/vllm-tpu:v0.30.0",
    "evil.example.com/vllm/vllm-tpu:v0.30.0",
    "ghcr.io/vllm-project/vllm-tpu:v0.30.0",
    "quay.io/vllm/vllm-tpu:v0.30.0",
    "vllm/vllm-tpu-evil:v0.30.0",
    "vllm/vllm-tpu.evil:v0.30.0",
    "vllm-tpu:v0.30.0",
    "vllmm/vllm-tpu:v0.30.0",
    "attacker/vllm-tpu:v0.30.0",
    "vllm/vllm-tpu/x:v0.30.0",
    "docker.io.evil.com/vllm/vllm-tpu:v0.30.0",
    "registry-1.docker.io:443/vllm/vllm-tpu:v0.30.0",
    "index.docker.io:5000/vllm/vllm-tpu:v0.30.0",
    "localhost:5000/vllm/vllm-tpu:v0.30.0",
    "[::1]:5000/vllm/vllm-tpu:v0.30.0",
    "Vllm/vllm-tpu:v0.30.0",
    "DOCKER.IO/vllm/vllm-tpu:v0.30.0",
    "attacker/x@sha256:" + "1" * 64,
    "vllm/vllm-tpu@sha256:" + "A" * 64,
    "vllm/vllm-tpu:v0.30.0 --privileged",
    "vllm/vllm-tpu\u200b:v0.30.0",
    "ｖllm/vllm-tpu:v0.30.0",
)


async def images_section(s: Any, full: bool) -> None:
    """Every foreign or lookalike image through the paths an argument sets an image on (the serving
    overrides of render_startup_script and reconfigure_vllm, dry run and not), then the VM's own check of
    the rendered script (vm_check) on each."""
    f = s.figures.trust
    f.foreign_images = len(FOREIGN_IMAGES)
    calls = [("render_startup_script", {}), ("reconfigure_vllm", {"dry_run": True})]
    if full:
        calls.append(("reconfigure_vllm", {"dry_run": False}))
    for image in FOREIGN_IMAGES:
        for tool, extra in calls:
            answer = await s.call(tool, {"vllm_image": image, **extra})
            if not answer.is_error:
                f.images_accepted.append(f"{tool}({image!r})")
    script = await _script(s)
    for image in FOREIGN_IMAGES:
        if _vm_check(script, "names", "google/gemma-4-E2B-it", image, repositories=True):
            f.vm_images_accepted.append(image)


async def _script(s: Any) -> str:
    """The whole rendered script, as a host gets it: through resources/read of the answer's file (the
    answer itself carries only the settings block), or inline when the server could not write the file."""
    answer = await s.call("render_startup_script", {})
    file = (answer.structured or {}).get("file")
    if not file:
        return answer.text
    return str((await s.client.read_resource(file["uri"])).contents[0].text)


def _vm_check(script: str, *args: str, repositories: bool = False) -> bool:
    """True when the rendered script's own check accepts ``args`` (run by bash exactly as rendered)."""
    import shlex

    start = script.index("vm_check() {")
    func = script[start : script.index("\n}\n", start) + 3]
    repos = next(line for line in script.splitlines() if line.startswith("IMAGE_REPOSITORIES="))
    tail = ' "${IMAGE_REPOSITORIES[@]}"' if repositories else ""
    body = f"{repos}\n{func}\nvm_check {' '.join(shlex.quote(a) for a in args)}{tail} >/dev/null && echo ACCEPTED"
    out = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=60)
    return "ACCEPTED" in out.stdout


# ---- names: model ids, relative names --------------------------------------------------------------------

BAD_MODELS = (
    "../../../etc/cron.d/x", "google/../../x", "google/gemma-4-E2B-it/../../..", "..", "/models/../../etc",
    "google//gemma", "google/gemma-4-E2B-it.git", "google/gemma 4", "google/gemma$(touch /tmp/x)",
    "google/gemma\u202e-it", "google/gem\u200bma", "google/gemma\x00", "google/gemma\nrm -rf /",
    "googlе/gemma-4-E2B-it", "~/models/x", "google/gemma-4-E2B-it/",
)  # fmt: skip
BAD_FILE_NAMES = (
    "../../../../escaped", "/etc/cron.d/escaped", "a/../../../escaped", "a//b", "./a/../../b", "..", "",
    "ok\u202etxt", "ok\u200btxt", "ok\nx", "a\\..\\..\\b",
)  # fmt: skip


async def names_section(s: Any, state_dir: Path) -> None:
    """Unsafe model names through the serving overrides, and planted weights-manifest names and
    compile-cache archive members through the VM's own check (vm_check) of the rendered script."""
    import io
    import tarfile

    f = s.figures.trust
    f.bad_names = len(BAD_MODELS) + 2 * len(BAD_FILE_NAMES)
    for model in BAD_MODELS:
        for tool, extra in (("render_startup_script", {}), ("reconfigure_vllm", {"dry_run": True})):
            answer = await s.call(tool, {"model_name": model, **extra})
            if not answer.is_error:
                f.names_accepted.append(f"{tool}(model_name={model!r})")
    script = await _script(s)
    for i, name in enumerate(BAD_FILE_NAMES):
        manifest = state_dir / f"planted-manifest-{i}.json"
        manifest.write_text(
            json.dumps({"files": [{"name": "config.json", "size": 1}, {"name": name, "size": 1}]})
        )
        if _vm_check(script, "manifest", str(manifest)):
            f.vm_names_accepted.append(f"manifest name {name!r}")
        archive = state_dir / f"planted-cache-{i}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            info = tarfile.TarInfo(name or "./")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        if name and _vm_check(script, "archive", str(archive)):
            f.vm_names_accepted.append(f"archive member {name!r}")
        elif not name:
            f.bad_names -= 1  # an empty member name is the archive's root: nothing to refuse
    link = state_dir / "planted-cache-link.tar.gz"
    with tarfile.open(link, "w:gz") as tar:
        for member, kind in (("escape", tarfile.SYMTYPE), ("escape/x", tarfile.REGTYPE)):
            info = tarfile.TarInfo(member)
            info.type, info.linkname, info.size = kind, "/etc", 1 if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(b"x") if kind == tarfile.REGTYPE else None)
    f.bad_names += 1
    if _vm_check(script, "archive", str(link)):
        f.vm_names_accepted.append("archive with a symlink out of the cache")


# ---- exposure: one rule for the VM firewall and the GKE LoadBalancer -----------------------------------

INVALID_RANGES = (["0.0.0.0/00"], ["0.0.0.0/000"], ["00.0.0.0/0"], ["10.0.0.0/08"], ["203.0.113.7/33"],
                  ["::/0"], ["0.0.0.0/-1"])  # fmt: skip
WIDE_RANGES = (
    ["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["1.0.0.0/8"], ["8.0.0.0/7"], ["1.0.0.0/15"],
    ["11.0.0.0/16", "12.0.0.0/16"], [f"34.{b}.0.0/18" for b in range(0, 256, 64)] + ["35.0.0.0/24"],
    ["10.0.0.0/8", "0.0.0.0/1", "128.0.0.0/1"], [f"{a}.0.0.0/8" for a in range(20, 24)],
)  # fmt: skip


async def exposure_section(s: Any) -> None:
    """Invalid and wide sets of ranges on both paths (plan_gke_deployment's LoadBalancer and
    plan_queued_resource's firewall rule): invalid ones refused even with open_to_internet; wide ones
    refused without it and warned about loudly with it."""
    f = s.figures.trust
    paths = [("plan_gke_deployment", {"cluster": "gemma", "service_type": "LoadBalancer"}, "source_ranges"),
             ("plan_queued_resource", {}, "allowed_source_ranges")]  # fmt: skip
    f.range_sets = len(INVALID_RANGES) + len(WIDE_RANGES)
    for ranges in (*INVALID_RANGES, *WIDE_RANGES):
        wide = ranges in WIDE_RANGES
        for tool, base, arg in paths:
            for open_to_internet in (False, True):
                answer = await s.call(tool, {**base, arg: ranges, "open_to_internet": open_to_internet})
                if not answer.is_error and not (wide and open_to_internet):
                    f.ranges_accepted.append(f"{tool}({ranges}, open_to_internet={open_to_internet})")
                if wide and open_to_internet and "OPEN TO THE INTERNET" not in answer.text:
                    f.warnings_missing.append(f"{tool}({ranges})")


# ---- the report rows --------------------------------------------------------------------------------------


def rows(t: TrustFigures) -> list[tuple[str, str, bool, str, list[str]]]:
    """(figure, value, ok, goal, details) for `tests.audit.run.report`."""
    return [
        ("deletions without a person or standing permission",
         f"{len(t.deletions_without_person)} ({t.deletion_attempts} att., {len(t.deletion_styles)} styles)",
         not t.deletions_without_person and t.deletion_attempts > 0, "0", t.deletions_without_person),
        ("deletion controls that did not delete", str(len(t.controls_failed)), not t.controls_failed, "0", t.controls_failed),
        ("programs run from a kubeconfig", f"{len(t.programs_run)}/{t.kubeconfig_calls} calls",
         not t.programs_run and t.kubeconfig_calls > 0, "0", t.programs_run),
        ("hostile kubeconfigs accepted", f"{len(t.kubeconfigs_accepted)}/{t.kubeconfigs}", not t.kubeconfigs_accepted,
         "0", t.kubeconfigs_accepted),
        ("foreign images accepted by the server", f"{len(t.images_accepted)}/{t.foreign_images}",
         not t.images_accepted and t.foreign_images > 0, "0", t.images_accepted),
        ("foreign images accepted by the VM", f"{len(t.vm_images_accepted)}/{t.foreign_images}", not t.vm_images_accepted,
         "0", t.vm_images_accepted),
        ("unsafe names accepted by the server", str(len(t.names_accepted)), not t.names_accepted, "0", t.names_accepted),
        ("unsafe names accepted by the VM", f"{len(t.vm_names_accepted)}/{t.bad_names}", not t.vm_names_accepted, "0",
         t.vm_names_accepted),
        ("invalid or wide ranges accepted", f"{len(t.ranges_accepted)}/{t.range_sets}", not t.ranges_accepted and t.range_sets > 0,
         "0", t.ranges_accepted),
        ("open ranges without the loud warning", str(len(t.warnings_missing)), not t.warnings_missing, "0", t.warnings_missing),
    ]  # fmt: skip


def opener(client_for: Any, env: dict[str, str], stderr: Path, project: Path) -> Any:
    """``open_client(callback, extra_env)``: another server session of the audited server (same fakes,
    same state directory), its host answering the server's questions with ``callback`` (None: a host
    without elicitation)."""
    import contextlib

    @contextlib.asynccontextmanager
    async def open_client(callback: Any, extra: dict[str, str]) -> Any:
        kwargs = {"elicitation_callback": callback} if callback is not None else {}
        async with client_for({**env, **extra}, stderr, cwd=project, **kwargs) as client:
            yield client

    return open_client
