"""Names are names (`tpu_devops.names`): model ids, relative names and images of allowed repositories only,
checked the same way by the server and, in bash on the VM, by the rendered startup script's own check
(`vm_check`, run here exactly as rendered)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.startup_vm import settings as script_settings
from tpu_devops import names
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError
from tpu_devops.planning import startup

DIGEST = "sha256:" + "0123456789abcdef" * 4
DEFAULT = (names.DEFAULT_IMAGE_REPOSITORY,)

ALLOWED_IMAGES = [
    "vllm/vllm-tpu:v0.30.0",
    "vllm/vllm-tpu",
    f"vllm/vllm-tpu@{DIGEST}",
    f"vllm/vllm-tpu:v0.30.0@{DIGEST}",
    "docker.io/vllm/vllm-tpu:v0.30.0",
    "index.docker.io/vllm/vllm-tpu:v0.30.0",  # docker's legacy name for Docker Hub
    "registry-1.docker.io/vllm/vllm-tpu:nightly",  # Docker Hub's registry host
    "vllm/vllm-tpu:V0.30.0_TPU",  # a tag may have capitals
]
FOREIGN_IMAGES = [
    "evil.example.com/x/vllm-tpu:v0.30.0",  # the reported one
    "evil.example.com/vllm/vllm-tpu:v0.30.0",  # same path, another registry
    "ghcr.io/vllm/vllm-tpu:v0.30.0",
    "us-docker.pkg.dev/p/r/vllm-tpu:v0.30.0",
    "vllm/vllm-tpu-evil:v0.30.0",  # lookalike names
    "vllm/vllm-tpux",
    "vllm-tpu:v0.30.0",  # an official image of that name (library/vllm-tpu)
    "evil/vllm-tpu:v0.30.0",  # vllm-tpu under another namespace
    "vllm/vllm-tpu/evil:v0.30.0",  # a repository below the allowed one
    "vllm/vllm/vllm-tpu",
    "docker.io.evil.com/vllm/vllm-tpu:v0.30.0",
    "docker.io:443/vllm/vllm-tpu:v0.30.0",  # a port is part of the registry
    "localhost:5000/vllm/vllm-tpu:v0.30.0",
    "localhost/vllm/vllm-tpu",
    "127.0.0.1/vllm/vllm-tpu",
    f"evil/x@{DIGEST}",  # a digest does not make another repository allowed
    f"evil.example.com/x/vllm-tpu@{DIGEST}",
]
MALFORMED_IMAGES = [
    "VLLM/VLLM-TPU:v0.30.0",  # uppercase
    "vllm/VLLM-tpu",
    "DOCKER.IO/vllm/vllm-tpu",
    "vllm/vllm-tpu@sha256:abc",  # short digest
    f"vllm/vllm-tpu@sha512:{'0' * 128}",
    "vllm/vllm-tpu@",
    "vllm/vllm-tpu:v0.30.0 --privileged",
    "vllm/vllm-tpu:$(id)",
    "vllm/vllm-tpu\n:v1",
    "vllm/vllm-tpu:v1\u202e",
    " vllm/vllm-tpu",
    "",
    "vllm//vllm-tpu",
    "/vllm/vllm-tpu",
    "vllm/vllm-tpu:-bad",
    "vllm/vllm-tpu:" + "v" * 200,
]


@pytest.mark.parametrize("image", ALLOWED_IMAGES)
def test_images_of_the_pinned_repository_are_allowed_under_every_spelling(image: str) -> None:
    assert names.check_image(image, DEFAULT).repository == "docker.io/vllm/vllm-tpu"


@pytest.mark.parametrize("image", FOREIGN_IMAGES)
def test_any_other_registry_or_repository_is_refused_with_the_fix(image: str) -> None:
    with pytest.raises(ConfigError) as err:
        names.check_image(image, DEFAULT, "vllm_image")
    e = err.value
    assert e.field == "vllm_image" and "not an allowed image repository" in e.message
    assert "privileged" in e.message and "VLLM_IMAGE_REPOSITORIES" in (e.fix or "")


@pytest.mark.parametrize("image", MALFORMED_IMAGES)
def test_malformed_references_are_refused_before_any_allow_list(image: str) -> None:
    with pytest.raises(ConfigError) as err:
        names.check_image(image, DEFAULT + ("docker.io/vllm/vllm",), "vllm_image")
    assert (
        err.value.field == "vllm_image"
        and "\n" not in str(err.value.value)
        and "\u202e" not in str(err.value)
    )


def test_the_operator_adds_repositories_exactly_and_official_images_normalise() -> None:
    repos = names.repositories_setting(
        "us-docker.pkg.dev/my-proj/mirror/vllm-tpu, haproxy index.docker.io/a/b"
    )
    assert repos == (
        "docker.io/vllm/vllm-tpu", "us-docker.pkg.dev/my-proj/mirror/vllm-tpu", "docker.io/library/haproxy",
        "docker.io/a/b",
    )  # fmt: skip
    assert names.check_image("us-docker.pkg.dev/my-proj/mirror/vllm-tpu:v0.30.0", repos)
    assert names.check_image("library/haproxy:3.2", repos) and names.check_image("haproxy", repos)
    for other in ("us-docker.pkg.dev/my-proj/mirror/vllm-tpu2", "us-docker.pkg.dev/my-proj/mirror", "a/b/c"):
        with pytest.raises(ConfigError):
            names.check_image(other, repos)
    for entry in ("vllm/vllm-tpu:v0.30.0", f"x/y@{DIGEST}", "Bad/Repo"):
        with pytest.raises(ConfigError) as err:
            names.repositories_setting(entry)
        assert err.value.field == "VLLM_IMAGE_REPOSITORIES"


def test_settings_refuse_a_foreign_vllm_image_unless_its_repository_is_allowed(tmp_path: Path) -> None:
    env = {"VLLM_IMAGE": "evil.example.com/x/vllm-tpu:v0.30.0"}
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none", environ=env)
    assert err.value.field == "VLLM_IMAGE"
    allowed = load_settings(
        tmp_path / "none", environ={**env, "VLLM_IMAGE_REPOSITORIES": "evil.example.com/x/vllm-tpu"}
    )
    assert allowed.image_repositories == ("docker.io/vllm/vllm-tpu", "evil.example.com/x/vllm-tpu")
    s = load_settings(tmp_path / "none", environ={})
    for image in FOREIGN_IMAGES[:3]:
        with pytest.raises(ConfigError) as err:
            startup.apply_overrides(s, vllm_image=image)
        assert err.value.field == "vllm_image"
    # a copy with the field replaced behind the rules' back is refused where it becomes a script
    with pytest.raises(ConfigError):
        startup.render_startup_script(s.model_copy(update={"vllm_image": FOREIGN_IMAGES[0]}))


def test_a_non_default_source_is_called_out() -> None:
    assert names.non_default_source("vllm/vllm-tpu:v0.31.0") is None
    line = names.source_change("vllm/vllm-tpu:v0.30.0", "us-docker.pkg.dev/p/r/vllm-tpu:v1")
    assert line and "docker.io/vllm/vllm-tpu -> us-docker.pkg.dev/p/r/vllm-tpu" in line and "token" in line


# ---- model ids and relative names -------------------------------------------------------------------------

MODEL_IDS = [
    "google/gemma-4-E2B-it", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "gpt2", "a/b", "_org/x_",
]  # fmt: skip
NOT_MODEL_IDS = [
    "../../etc", "google/../x", "google/..", "..", ".", "google/gemma/../../x", "google//gemma", "google/",
    "google/gemma-4-E2B-it.git", "google--x/y", "a/b/c", "google/gemma\x00", "google/gemma\n",
    "google/gem\u202ema", "google/gem\u200bma", "google/gemmа", "~/models", "google/gemma 4", "-x/y", "x/y-",
    "google/gemma$(id)", "", " google/gemma", "a" * 97, "google/" + "a" * 97,
]  # fmt: skip


@pytest.mark.parametrize("model", MODEL_IDS)
def test_hugging_face_repo_ids_pass_as_huggingface_hub_validates_them(model: str) -> None:
    from huggingface_hub.utils import validate_repo_id

    validate_repo_id(model)
    assert names.check_model_id(model, "model_name") == model


@pytest.mark.parametrize("model", NOT_MODEL_IDS)
def test_anything_else_is_refused_and_never_looser_than_huggingface_hub(model: str) -> None:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    with pytest.raises(ConfigError) as err:
        names.check_model_id(model, "model_name")
    assert err.value.field == "model_name" and "\n" not in str(err.value.value)
    if not model.startswith("/") and "/" in model.strip("/") and model.isascii():
        try:
            validate_repo_id(model)
        except HFValidationError:
            pass  # both refuse it


@pytest.mark.parametrize("model", ["/models/gemma-4-E2B-it", "/mnt/weights/x"])
def test_a_safe_container_path_is_a_model_too(model: str) -> None:
    assert names.check_model_id(model, "MODEL_NAME") == model


@pytest.mark.parametrize("model", ["/models/../etc", "/models//x", "/models/.", "/", "/models/x\x7f"])
def test_an_unsafe_container_path_is_not(model: str) -> None:
    with pytest.raises(ConfigError):
        names.check_model_id(model, "MODEL_NAME")


def test_model_names_are_refused_in_settings_and_overrides(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none", environ={"MODEL_NAME": "google/../../etc"})
    assert err.value.field == "MODEL_NAME"
    s = load_settings(tmp_path / "none", environ={})
    for bad in ("../x", "google/gem\u202ema", "x\x00"):
        with pytest.raises(ConfigError) as err:
            startup.apply_overrides(s, model_name=bad)
        assert err.value.field == "model_name"


@pytest.mark.parametrize(
    "name",
    ["../x", "a/../b", "/etc/passwd", "a//b", "./a", "a/.", "", "a\x00b", "a\nb", "a\u202eb", "a\u2066b",
     "a\ufeffb", "a\\b", "x" * 1025],
)  # fmt: skip
def test_relative_names_refuse_traversal_and_invisible_characters(name: str) -> None:
    assert names.name_problem(name) is not None
    with pytest.raises(ConfigError):
        names.check_relative_name(name, "name")


def test_relative_names_keep_plain_ones() -> None:
    for name in (
        "config.json",
        "weights/google/gemma-4-E2B-it/model-00001-of-00002.safetensors",
        "a..b",
        ".hidden",
    ):
        assert names.check_relative_name(name, "name") == name


# ---- the VM's own checks, as rendered ---------------------------------------------------------------------


def _function(script: str, name: str) -> str:
    start = script.index(f"{name}() {{")
    return script[start : script.index("\n}\n", start) + 3]


def _vm(tmp_path: Path, body: str, repositories: str = "") -> subprocess.CompletedProcess:
    env = {"VLLM_IMAGE_REPOSITORIES": repositories} if repositories else {}
    script = startup.render_startup_script(script_settings(**env)).script
    repos = next(line for line in script.splitlines() if line.startswith("IMAGE_REPOSITORIES="))
    path = tmp_path / "check.sh"
    path.write_text("\n".join([repos, _function(script, "vm_check"), body]))
    return subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=60)


def test_the_vm_agrees_with_the_server_on_every_image_and_model(tmp_path: Path) -> None:
    cases = [("google/gemma-4-E2B-it", i) for i in ALLOWED_IMAGES + FOREIGN_IMAGES + MALFORMED_IMAGES[:11]]
    cases += [(m, "vllm/vllm-tpu:v0.30.0") for m in MODEL_IDS + NOT_MODEL_IDS if "\x00" not in m]
    lines = [
        f'vm_check names {_sh(m)} {_sh(i)} "${{IMAGE_REPOSITORIES[@]}}" >/dev/null && echo ok || echo no'
        for m, i in cases
    ]
    out = _vm(tmp_path, "\n".join(lines)).stdout.split()
    expected = []
    for model, image in cases:
        try:
            names.check_model_id(model, "m")
            names.check_image(image, DEFAULT)
            expected.append("ok")
        except ConfigError:
            expected.append("no")
    assert list(zip(cases, out, strict=True)) == list(zip(cases, expected, strict=True))
    mirror = _vm(tmp_path, 'vm_check names google/gemma-4-E2B-it us-docker.pkg.dev/p/r/vllm-tpu:v1 "${IMAGE_REPOSITORIES[@]}" && echo ok',
                 repositories="us-docker.pkg.dev/p/r/vllm-tpu")  # fmt: skip
    assert mirror.stdout.strip() == "ok"


def _sh(value: str) -> str:
    import shlex

    return shlex.quote(value)


def _tarball(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for m in members:
            archive.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, target, 1 if kind == tarfile.REGTYPE else 0
    return info


def test_a_planted_compile_cache_with_unsafe_members_is_not_extracted(tmp_path: Path) -> None:
    good = _tarball(
        tmp_path / "good.tgz", [_member("./", tarfile.DIRTYPE), _member("./a/b.bin"), _member("c")]
    )
    planted = {
        "dotdot": [_member("../escape")],
        "nested": [_member("a/../../escape")],
        "absolute": [_member("/etc/cron.d/x")],
        "symlink": [_member("link", tarfile.SYMTYPE, "/etc"), _member("link/x")],
        "hardlink": [_member("h", tarfile.LNKTYPE, "/etc/passwd")],
        "device": [_member("dev", tarfile.CHRTYPE)],
        "bidi": [_member("a\u202eb")],
        "newline": [_member("a\nb")],
    }
    body = [f"vm_check archive {good} && echo good-ok"]
    for name, members in planted.items():
        body.append(
            f"vm_check archive {_tarball(tmp_path / (name + '.tgz'), members)} >/dev/null || echo {name}-refused"
        )
    (tmp_path / "junk.tgz").write_bytes(b"not a tarball")
    body.append(f"vm_check archive {tmp_path / 'junk.tgz'} >/dev/null || echo junk-refused")
    out = _vm(tmp_path, "\n".join(body)).stdout.split()
    assert out == ["good-ok", *(f"{n}-refused" for n in planted), "junk-refused"]
