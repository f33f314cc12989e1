"""Container image references as the kubelet reads them: an image it cannot parse never starts
(InvalidImageName, pkg/kubelet/images/image_manager.go), so it is refused with its line when the job is compiled.

The kubelet parses with github.com/distribution/reference's ParseNormalizedNamed (pkg/util/parsers); the grammar
below is that module's regexp.go (v0.6.0) written out, and `reference_problem` follows normalize.go and
reference.go's Parse, with go-digest's check of a digest's algorithm and length.
"""

from __future__ import annotations

import re
from typing import Final

# regexp.go, piece by piece. Go's `\w` is ASCII and `[[:xdigit:]]` is [0-9A-Fa-f]; Python's `\w` is not.
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_NAME_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_OPTIONAL_PORT = r"(?::[0-9]+)?"
_TAG = r"[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_IDENTIFIER = r"([a-f0-9]{64})"
_IPV6_ADDRESS = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_NAME = _DOMAIN_NAME_COMPONENT + r"(?:\." + _DOMAIN_NAME_COMPONENT + ")*"
_HOST = f"(?:{_DOMAIN_NAME}|{_IPV6_ADDRESS})"
_DOMAIN_AND_PORT = _HOST + _OPTIONAL_PORT
_PATH_COMPONENT = _ALPHANUMERIC + f"(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = _PATH_COMPONENT + f"(?:/{_PATH_COMPONENT})*"
_NAME = f"(?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME}"
REFERENCE: Final = re.compile(f"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?")  # used with fullmatch: Go's ^...$
_ANCHORED_NAME = re.compile(f"(?:({_DOMAIN_AND_PORT})/)?({_REMOTE_NAME})")
_ANCHORED_IDENTIFIER = re.compile(_IDENTIFIER)

# reference.go RepositoryNameTotalLengthMax.
REPOSITORY_NAME_MAX: Final = 255
# go-digest's algorithms and the lowercase hex length of each (algorithm.go anchoredEncodedRegexps).
_DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
# normalize.go: Docker Hub, and where its one-part ("familiar") names live.
_DEFAULT_DOMAIN = "docker.io"
_LEGACY_DEFAULT_DOMAIN = "index.docker.io"
_OFFICIAL_REPO_PREFIX = "library/"


def _split_docker_domain(name: str) -> tuple[str, str]:
    """normalize.go splitDockerDomain."""
    maybe_domain, slash, maybe_remote = name.partition("/")
    if not slash:
        return _DEFAULT_DOMAIN, _OFFICIAL_REPO_PREFIX + name
    if maybe_domain == "localhost" or (maybe_domain != _LEGACY_DEFAULT_DOMAIN and (
            any(c in maybe_domain for c in ".:") or maybe_domain.lower() != maybe_domain)):
        domain, remote = maybe_domain, maybe_remote
    elif maybe_domain == _LEGACY_DEFAULT_DOMAIN:
        domain, remote = _DEFAULT_DOMAIN, maybe_remote
    else:
        domain, remote = _DEFAULT_DOMAIN, name
    if domain == _DEFAULT_DOMAIN and "/" not in remote:
        remote = _OFFICIAL_REPO_PREFIX + remote
    return domain, remote


def normalized(image: str) -> str:
    """`image` as the kubelet and containerd name it (normalize.go ParseNormalizedNamed, then TagNameOnly): Docker
    Hub's domain and `library/` where it has none, `:latest` where it has no tag or digest."""
    domain, remainder = _split_docker_domain(image)
    last = remainder.rsplit("/", 1)[-1]
    return f"{domain}/{remainder}" + ("" if ":" in last or "@" in last else ":latest")


def reference_problem(image: str) -> str | None:
    """Why the kubelet cannot parse `image` as an image reference (in words), or None."""
    if _ANCHORED_IDENTIFIER.fullmatch(image):
        return "a bare 64-digit hex identifier is no image name"
    domain, remainder = _split_docker_domain(image)
    if (repository := remainder.partition(":")[0]).lower() != repository:
        return f"repository name {repository!r} must be lowercase"
    match = REFERENCE.fullmatch(f"{domain}/{remainder}")
    if match is None:
        return ("not an image reference: [HOST[:PORT]/]PATH[:TAG][@DIGEST], PATH in lowercase letters, digits "
                "and '.', '_', '-' between them, TAG at most 128 letters, digits, '_', '.' and '-'")
    if len(_ANCHORED_NAME.fullmatch(match[1])[2]) > REPOSITORY_NAME_MAX:  # type: ignore[index]
        return f"repository name is more than {REPOSITORY_NAME_MAX} characters"
    if match[3]:
        algorithm, _, encoded = match[3].partition(":")
        if algorithm not in _DIGEST_HEX:
            return f"digest algorithm {algorithm!r} is not one of {', '.join(_DIGEST_HEX)}"
        if not re.fullmatch(f"[a-f0-9]{{{_DIGEST_HEX[algorithm]}}}", encoded):
            return f"a {algorithm} digest is {_DIGEST_HEX[algorithm]} lowercase hex digits"
    return None
