"""Names are names: a model id is a Hugging Face repo id, an object or file name is a safe relative name,
and a container image comes only from a repository the operator trusts.

Each rule is here once; the settings (`tpu_devops.config`), the tool arguments (`tpu_devops.tools.args`)
and the domain functions that build scripts, manifests and bucket paths call it, and the VM's startup
script checks the same things again before it writes a file or runs an image (startup_script.sh.tmpl).

**Model ids** (`check_model_id`): a Hugging Face repo id as ``huggingface_hub.utils.validate_repo_id``
defines it (at most one ``/``; each part 1-96 of ``A-Z a-z 0-9 . _ -``, starting and ending with a letter,
a digit or ``_``; no ``--`` or ``..``; not ending in ``.git``), ASCII only; or an absolute path inside the
container made of safe relative parts (``/models/gemma-4-E2B-it``).

**Relative names** (`check_relative_name`): what a bucket object or a file under a root may be called:
no leading ``/``, no ``\\``, no empty, ``.`` or ``..`` part, no control character (NUL, newline, DEL: Unicode
category Cc), no format character (bidi overrides and isolates, zero-width spaces, the BOM: Cf), at most
`MAX_NAME_CHARS` characters.

**Images** (`parse_image`, `check_image`): references are read with the grammar and normalisation of
the distribution/reference library that docker uses (``reference/regexp.go``, ``normalize.go``): the first
part is a registry only when it contains ``.`` or ``:`` or is ``localhost``; otherwise the image is on
Docker Hub, where a one-part name is an official image (``library/``). ``index.docker.io`` (docker's legacy
name) and ``registry-1.docker.io`` (Docker Hub's registry host) are Docker Hub too. A repository is then
``<registry>/<path>`` (``docker.io/vllm/vllm-tpu``), and an image is allowed only when its repository is
one of the allowed ones exactly: no prefix match, a port is part of the registry, uppercase is refused
(docker refuses it in repository paths; a registry spelled in capitals is not the one listed). Tags and
``sha256`` digests of an allowed repository are accepted; a digest does not make another repository's
image allowed. The default list is the project's pinned `DEFAULT_IMAGE_REPOSITORY`; the operator adds
more with ``VLLM_IMAGE_REPOSITORIES``. Why: the serving container runs ``--privileged --net host`` with
the Hugging Face token and the vLLM API key in its environment.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from tpu_devops.errors import ConfigError

DEFAULT_IMAGE_REPOSITORY = "docker.io/vllm/vllm-tpu"
DOCKER_HUB = "docker.io"
# Docker Hub under the names docker accepts for it: its canonical domain, the legacy index name that
# docker's reference library normalises to it, and the registry host it actually serves from.
HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
IMAGE_VARIABLE = "VLLM_IMAGE_REPOSITORIES"
MAX_NAME_CHARS = 1024
MAX_MODEL_ID_CHARS = 200

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_RE = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
_DOMAIN_RE = re.compile(rf"^{_DOMAIN}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPO_PART = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?$")
_IMAGE_FIX = (
    "use an image of an allowed repository, e.g. vllm/vllm-tpu:v0.30.0 or vllm/vllm-tpu@sha256:<64 hex>"
)


# ---- relative names and model ids -----------------------------------------------------------------------


def bad_characters(value: str) -> list[str]:
    """The control (Cc) and format (Cf: bidi overrides, zero-width, BOM) characters in ``value``, as
    ``U+202E`` strings (empty when there are none)."""
    return [f"U+{ord(c):04X}" for c in value if unicodedata.category(c) in ("Cc", "Cf")]


def name_problem(value: str, *, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """Why ``value`` is not a safe relative name (module docstring), or None when it is one."""
    if not isinstance(value, str) or not value:
        return "empty"
    if len(value) > max_chars:
        return f"longer than {max_chars} characters"
    bad = bad_characters(value)
    if bad:
        return f"contains control or invisible characters ({', '.join(sorted(set(bad))[:4])})"
    if value.startswith("/"):
        return "an absolute path"
    if "\\" in value:
        return "contains a backslash"
    parts = value.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' part"
    return None


def check_relative_name(value: str, field: str, *, max_chars: int = MAX_NAME_CHARS) -> str:
    """``value`` when it is a safe relative name (module docstring).

    Raises:
        ConfigError: naming ``field``, the problem and the fix.
    """
    problem = name_problem(value, max_chars=max_chars)
    if problem:
        raise ConfigError(
            f"not a safe relative name: {problem}",
            field=field,
            value=_shown(value),
            fix="use a plain relative name such as weights/google/gemma-4-E2B-it/config.json",
        )
    return value


def model_id_problem(value: str) -> str | None:
    """Why ``value`` is not a model id (module docstring), or None when it is one."""
    if not isinstance(value, str) or not value.strip():
        return "empty"
    if value != value.strip():
        return "has spaces around it"
    if len(value) > MAX_MODEL_ID_CHARS:
        return f"longer than {MAX_MODEL_ID_CHARS} characters"
    if bad_characters(value) or not value.isascii():
        return "contains characters other than ASCII letters, digits, '.', '_', '-' and '/'"
    if value.startswith("/"):
        problem = name_problem(value[1:])
        if problem is None and not all(_REPO_PART.match(p) for p in value[1:].split("/")):
            problem = (
                "has a part that is not letters, digits, '.', '_' and '-' between a letter, digit or '_'"
            )
        return None if problem is None else f"a container path that {problem}"
    parts = value.split("/")
    if len(parts) > 2:
        return "has more than one '/' (a Hugging Face repo id is owner/name)"
    if not all(_REPO_PART.match(p) for p in parts):
        return "each part must be 1-96 letters, digits, '.', '_' or '-', starting and ending with a letter, digit or '_'"
    if "--" in value or ".." in value:
        return "contains '--' or '..'"
    if value.endswith(".git"):
        return "ends in .git"
    return None


def check_model_id(value: str, field: str) -> str:
    """``value`` when it is a Hugging Face repo id or a safe absolute container path (module docstring).

    Raises:
        ConfigError: naming ``field``, the problem and the fix.
    """
    problem = model_id_problem(value)
    if problem:
        raise ConfigError(
            f"not a Hugging Face repo id ({problem})",
            field=field,
            value=_shown(value),
            fix="use the model's repo id, e.g. google/gemma-4-E2B-it (or a container path such as /models/gemma-4-E2B-it)",
        )
    return value


def _shown(value: object) -> str:
    """A value quoted in an error: control and invisible characters escaped, at most 200 characters."""
    text = str(value)
    shown = "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in ("Cc", "Cf") else c for c in text)
    return shown[:200]


# ---- container images -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageReference:
    """A parsed, normalised image reference: ``registry`` (``docker.io``, ``us-docker.pkg.dev``,
    ``localhost:5000``), ``path`` (``vllm/vllm-tpu``, ``library/haproxy``), ``tag`` and ``digest``."""

    registry: str
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        """``registry/path``: what the allow-list lists."""
        return f"{self.registry}/{self.path}"


def _image_error(message: str, image: str, field: str, fix: str = _IMAGE_FIX) -> ConfigError:
    return ConfigError(message, field=field, value=_shown(image), fix=fix)


def parse_image(image: str, field: str = "vllm_image", *, repository_only: bool = False) -> ImageReference:
    """Read ``image`` as docker does (module docstring). ``repository_only``: a repository to list (no tag,
    no digest).

    Raises:
        ConfigError: not an image reference (named: uppercase, a bad tag or digest, a repository only
            allowed without tag / digest), with the fix.
    """
    if not isinstance(image, str) or not image or image != image.strip() or bad_characters(image):
        raise _image_error(
            "not a container image reference (empty, spaces or control characters)", image, field
        )
    if len(image) > 512 or not image.isascii():
        raise _image_error(
            "not a container image reference (over 512 characters, or not ASCII)", image, field
        )
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    if name != name.lower():
        raise _image_error(
            "not a container image reference: repository names are lowercase", image, field,
            fix=f"write it in lowercase, e.g. {image.lower()}",
        )  # fmt: skip
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
    if registry in HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    if not _DOMAIN_RE.match(registry) or not _PATH_RE.match(path) or len(name) > 255:
        raise _image_error("not a container image reference (registry/repository:tag)", image, field)
    if tag is not None and not _TAG_RE.match(tag):
        raise _image_error(f"not a valid image tag: {tag[:40]!r}", image, field)
    if digest and not _DIGEST_RE.match(digest):
        raise _image_error(
            "not a sha256 digest (sha256: and 64 lowercase hex digits)", image, field,
            fix="pin by digest as repository@sha256:<64 hex digits> (docker image inspect shows it)",
        )  # fmt: skip
    if "@" in image and not digest:
        raise _image_error("not a container image reference: '@' without a digest", image, field)
    if repository_only and (tag or digest):
        raise _image_error(
            "list repositories here, not images (no :tag, no @digest)", image, field,
            fix=f"list e.g. {registry}/{path}",
        )  # fmt: skip
    return ImageReference(registry, path, tag, digest or None)


def repositories_setting(raw: str, field: str = IMAGE_VARIABLE) -> tuple[str, ...]:
    """The allowed image repositories: `DEFAULT_IMAGE_REPOSITORY` plus ``raw``'s comma- or space-separated
    repositories, each normalised (``vllm/vllm-tpu`` -> ``docker.io/vllm/vllm-tpu``).

    Raises:
        ConfigError: an entry that is not a repository (an image with a tag or digest, a bad name).
    """
    out = [DEFAULT_IMAGE_REPOSITORY]
    for item in re.split(r"[\s,]+", raw.strip()):
        if item:
            repo = parse_image(item, field, repository_only=True).repository
            if repo not in out:
                out.append(repo)
    return tuple(out)


def check_image(image: str, allowed: tuple[str, ...], field: str = "vllm_image") -> ImageReference:
    """``image`` parsed, when its repository is one of ``allowed`` (normalised repositories, from
    `repositories_setting`); the one check every path that sets an image makes.

    Raises:
        ConfigError: not an image reference, or a repository that is not allowed (named, with the fix:
            an allowed image, or the setting that allows that repository).
    """
    ref = parse_image(image, field)
    if ref.repository not in allowed:
        raise ConfigError(
            f"{ref.repository} is not an allowed image repository (allowed: {', '.join(allowed)}): the vLLM "
            "container runs privileged with the Hugging Face token and the API key",
            field=field,
            value=_shown(image),
            fix=f"use an image of {allowed[0]} (e.g. vllm/vllm-tpu:v0.30.0), or, if you trust "
            f"{ref.repository}, add it to {IMAGE_VARIABLE} in tpu.env or the server's environment and restart",
        )
    return ref


def source_change(old: str, new: str) -> str | None:
    """A loud line when ``new`` comes from another repository than ``old`` (None when the same, or when
    either cannot be read): what a plan or a dry run says before the secrets go to another image."""
    try:
        a, b = parse_image(old).repository, parse_image(new).repository
    except ConfigError:
        return None
    if a == b:
        return None
    return (
        f"IMAGE SOURCE CHANGES: {a} -> {b}; the new image runs privileged with the Hugging Face token and "
        f"the API key (allowed by {IMAGE_VARIABLE})"
    )


def non_default_source(image: str) -> str | None:
    """The warning a plan shows when ``image`` is not from `DEFAULT_IMAGE_REPOSITORY` (None when it is)."""
    return source_change(f"{DEFAULT_IMAGE_REPOSITORY}:latest", image)
