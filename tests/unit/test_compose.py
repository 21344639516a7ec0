"""Checks docker-compose.yml and the Dockerfile against the code, without Docker.

Each check is a function returning a list of problems (empty: fine). The real files must have none;
``test_check_catches`` feeds every check a deliberately broken copy and requires it to complain, so
no check can silently pass whatever the files say.
"""
from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any, Callable

import click
import pytest
import yaml  # in the `test` extra: pip install -e '.[test]'

from delayq import config, options
from delayq.client.security import CLIENT_SETTINGS
from delayq.errors import ConfigError
from delayq.ops.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_PATH = ROOT / "docker-compose.yml"
DOCKERFILE_PATH = ROOT / "Dockerfile"
DOCKERIGNORE_PATH = ROOT / ".dockerignore"

NODES = ("node1", "node2", "node3")
EXPECTED_SERVICES = {"zookeeper", "mysql", "rabbitmq", "db-init", "certs", "demo-client", *NODES, "demo"}
IMAGES = {
    "zookeeper": r"zookeeper:3\.8(\.\d+)?",
    "mysql": r"mysql:8(\.\d+)*",
    "rabbitmq": r"rabbitmq:3(\.\d+)*-management",
}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


# --- loading -----------------------------------------------------------------------------------

def load_compose() -> dict[str, Any]:
    with COMPOSE_PATH.open() as fh:
        return yaml.safe_load(fh)


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def exec_form(args: str) -> list[str] | None:
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def dockerfile_cmd(text: str) -> list[str] | None:
    cmds = [exec_form(args) for word, args in dockerfile_instructions(text) if word == "CMD"]
    return cmds[-1] if cmds else None


def services(compose: dict) -> dict[str, dict]:
    return compose.get("services") or {}


def environment(service: dict) -> dict[str, str]:
    """A service's environment as strings, from either the mapping or the list form."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in env.items()}


def command(service: dict, dockerfile: str) -> list[str] | None:
    """The arguments given to the `delayq` entrypoint: the service's command, else the image's CMD."""
    cmd = service.get("command")
    if cmd is None:
        return dockerfile_cmd(dockerfile)
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def port_mappings(service: dict) -> list[tuple[str, int]]:
    """(host port, container port) of each published port (short or long syntax)."""
    out = []
    for p in service.get("ports") or []:
        if isinstance(p, dict):
            out.append((str(p.get("published", "")), int(p["target"])))
        else:
            parts = str(p).split("/")[0].split(":")
            out.append((parts[-2] if len(parts) > 1 else "", int(parts[-1])))
    return out


def depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def loadable(env: dict[str, str]) -> dict[str, str]:
    """The environment as the node reads it, with each secret's <ENV>_FILE (a file a one-shot job
    writes into a volume at run time) standing for a value given."""
    out = {k: v for k, v in env.items() if k not in options.SECRET_FILES}
    for key in env.keys() & options.SECRET_FILES:
        out.setdefault(key.removesuffix("_FILE"), _PLACEHOLDERS[key.removesuffix("_FILE")])
    return out


_PLACEHOLDERS = {"DELAYQ_MYSQL_URL": "mysql+pymysql://user:secret@mysql:3306/delayq",
                 "DELAYQ_AMQP_URL": "amqp://user:secret@rabbitmq:5672/%2F", "DELAYQ_ZK_AUTH": "user:secret"}


def delayq_env_keys(node: Any) -> set[str]:
    """Every DELAYQ_* name set anywhere in the document (services and x- extensions alike)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("DELAYQ_"):
                found.add(key)
            if key == "environment" and isinstance(value, list):
                found |= {item.split("=", 1)[0] for item in value if str(item).startswith("DELAYQ_")}
            found |= delayq_env_keys(value)
    elif isinstance(node, list):
        for item in node:
            found |= delayq_env_keys(item)
    return found


def resolve_command(args: list[str]) -> tuple[click.Command, str, list[str]]:
    """Walk `delayq ARGS` down the click groups; KeyError if a sub-command does not exist."""
    cmd: click.Command = cli_main
    name = "delayq"
    rest = list(args)
    while isinstance(cmd, click.Group):
        if not rest or rest[0] not in cmd.commands:
            raise KeyError(f"`{name}` has no sub-command {rest[0] if rest else '(none given)'!r}")
        name = rest.pop(0)
        cmd = cmd.commands[name]
    return cmd, name, rest


# --- checks ------------------------------------------------------------------------------------

Check = Callable[[dict, str], list[str]]


def check_structure(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    if not isinstance(compose, dict) or not isinstance(compose.get("services"), dict):
        return ["no `services:` mapping"]
    if "version" in compose:
        problems.append("`version:` is obsolete in the Compose spec")
    missing = EXPECTED_SERVICES - set(services(compose))
    if missing:
        problems.append(f"missing services: {sorted(missing)}")
    for name, svc in services(compose).items():
        if name in {"db-init", "certs", "demo-client", *NODES, "demo"} and "build" not in svc:
            problems.append(f"{name} is not built from the Dockerfile")
    return problems


def check_env_names(compose: dict, dockerfile: str) -> list[str]:
    unknown = delayq_env_keys(compose) - options.ENV_NAMES - options.SECRET_FILES - set(CLIENT_SETTINGS)
    return [f"{name} is not a setting of delayq.config" for name in sorted(unknown)]


def check_env_values(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    by_env = {s.env: s for s in options.SETTINGS}
    for name, svc in services(compose).items():
        env = environment(svc)
        ours = {k: v for k, v in env.items() if k in options.ENV_NAMES}
        if not ours:
            continue
        try:
            settings = config.load(environ=loadable(env))
        except ConfigError as e:
            problems.append(f"{name}: {e}")
            continue
        for key, text in ours.items():  # and each value is the one the node ends up with
            s = by_env[key]
            if getattr(getattr(settings, s.group), s.field) != s.kind(text):
                problems.append(f"{name}: {key}={text!r} not taken as given")
    return problems


def check_commands(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    expected = {**{n: "node" for n in NODES}, "db-init": "init", "certs": "dev", "demo-client": "add", "demo": "demo"}
    for name, sub in expected.items():
        svc = services(compose).get(name)
        if svc is None:
            continue
        args = command(svc, dockerfile)
        if not args:
            problems.append(f"{name}: no command and no CMD in the Dockerfile")
            continue
        try:
            cmd, cmd_name, rest = resolve_command(args)
        except KeyError as e:
            problems.append(f"{name}: {e.args[0]}")
            continue
        if cmd_name != sub:
            problems.append(f"{name}: runs `delayq {' '.join(args)}`, expected the `{sub}` command")
        try:  # parses and validates the options (names, types, ranges) without running anything
            cmd.make_context(cmd_name, rest)
        except click.ClickException as e:
            problems.append(f"{name}: `delayq {' '.join(args)}`: {e.format_message()}")
    return problems


def check_ports(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    seen: dict[str, str] = {}
    for name, svc in services(compose).items():
        for host, _ in port_mappings(svc):
            if not host:
                continue
            if host in seen:
                problems.append(f"host port {host} published by both {seen[host]} and {name}")
            seen.setdefault(host, name)
    for name in NODES:
        svc = services(compose).get(name, {})
        settings = config.load(environ=loadable(environment(svc)))
        port, http_port = str(settings.node.port), str(settings.http.port)
        targets = [str(target) for _, target in port_mappings(svc)]
        if port not in targets:
            problems.append(f"{name} does not publish DELAYQ_PORT {port}")
        if any(t not in (port, http_port) for t in targets):
            problems.append(f"{name}: container port {targets} is neither DELAYQ_PORT {port} nor DELAYQ_HTTP_PORT {http_port}")
        test = " ".join(map(str, (svc.get("healthcheck") or {}).get("test") or []))
        if not re.search(rf"\b{re.escape(http_port)}/readyz\b", test):
            problems.append(f"{name}: healthcheck does not probe /readyz on DELAYQ_HTTP_PORT {http_port}: {test!r}")
    return problems


def check_depends_on(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    svcs = services(compose)
    for name, svc in svcs.items():
        for dep, condition in depends_on(svc).items():
            if dep not in svcs:
                problems.append(f"{name} depends on unknown service {dep!r}")
                continue
            if condition not in CONDITIONS:
                problems.append(f"{name} -> {dep}: unknown condition {condition!r}")
            if condition == "service_healthy" and not (svcs[dep].get("healthcheck") or {}).get("test"):
                problems.append(f"{name} waits for {dep} to be healthy, but {dep} has no healthcheck")
            if condition == "service_completed_successfully" and svcs[dep].get("restart", "no") != "no":
                problems.append(f"{name} waits for {dep} to complete, but {dep} is restarted")
    wanted = {**{n: {"zookeeper": "service_healthy", "mysql": "service_healthy",
                     "rabbitmq": "service_healthy", "db-init": "service_completed_successfully",
                     "certs": "service_completed_successfully"}
                 for n in NODES},
              "db-init": {"mysql": "service_healthy"},
              "demo-client": {"db-init": "service_completed_successfully"},
              "demo": {**{n: "service_healthy" for n in NODES}, "demo-client": "service_completed_successfully"}}
    for name, deps in wanted.items():
        have = depends_on(svcs.get(name, {}))
        for dep, condition in deps.items():
            if have.get(dep) != condition:
                problems.append(f"{name} should wait for {dep} ({condition}), has {have.get(dep)}")
    return problems


def check_nodes(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    svcs = services(compose)
    ids: dict[str, str] = {}
    for name in NODES:
        env = environment(svcs.get(name, {}))
        node_id = env.get("DELAYQ_NODE_ID")
        if not node_id:
            problems.append(f"{name}: no DELAYQ_NODE_ID (the default depends on the container's hostname)")
        elif node_id in ids:
            problems.append(f"{name} and {ids[node_id]} share the node id {node_id!r}")
        else:
            ids[node_id] = name
        try:
            config.check_node(config.load(environ=loadable(env)))       # secured: its certificate and key
        except ConfigError as e:
            problems.append(f"{name}: {e}")
        url_file = env.get("DELAYQ_MYSQL_URL_FILE")
        init = command(svcs.get("db-init", {}), dockerfile) or []
        if url_file and url_file not in [init[i + 1] for i, a in enumerate(init[:-1]) if a == "--node-url-file"]:
            problems.append(f"{name}: reads its MySQL URL from {url_file}, which db-init does not write")
        if env.get("DELAYQ_HOST") != "0.0.0.0":
            problems.append(f"{name}: DELAYQ_HOST must be 0.0.0.0 to be reachable from other containers")
        if env.get("DELAYQ_ADVERTISE_HOST") not in (name, svcs.get(name, {}).get("hostname")):
            problems.append(f"{name}: advertises {env.get('DELAYQ_ADVERTISE_HOST')!r}, "
                            "which other containers cannot resolve")
        if svcs.get(name, {}).get("restart") != "unless-stopped":
            problems.append(f"{name}: restart should be unless-stopped")
    # The demo's endpoints must be the nodes, at the port they listen on inside the network.
    args = command(svcs.get("demo", {}), dockerfile) or []
    endpoints = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--endpoint"]
    if not endpoints:
        problems.append("the demo names no --endpoint")
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        if host not in NODES:
            problems.append(f"demo endpoint {ep}: {host!r} is not a node service")
        elif environment(svcs[host]).get("DELAYQ_PORT", "9090") != port:
            problems.append(f"demo endpoint {ep}: {host} listens on {environment(svcs[host]).get('DELAYQ_PORT')}")
    return problems


def check_rabbitmq(compose: dict, dockerfile: str) -> list[str]:
    """Every delayq service reaches RabbitMQ as the user and vhost the rabbitmq service makes
    (RABBITMQ_DEFAULT_*), never as guest."""
    from urllib.parse import unquote, urlsplit
    svcs = services(compose)
    rabbit = environment(svcs.get("rabbitmq", {}))
    user, password = rabbit.get("RABBITMQ_DEFAULT_USER", "guest"), rabbit.get("RABBITMQ_DEFAULT_PASS", "guest")
    vhost = rabbit.get("RABBITMQ_DEFAULT_VHOST", "/")
    problems = [] if user != "guest" else ["rabbitmq: delayq runs as guest (set RABBITMQ_DEFAULT_USER)"]
    for name, svc in svcs.items():
        url = environment(svc).get("DELAYQ_AMQP_URL")
        if not url:
            continue
        u = urlsplit(url)
        if (u.username, u.password, unquote(u.path[1:]) or "/") != (user, password, vhost):
            problems.append(f"{name}: DELAYQ_AMQP_URL is {u.username}@vhost {unquote(u.path[1:])!r}; "
                            f"rabbitmq makes {user}@vhost {vhost!r}")
    return problems


def check_images(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    for name, pattern in IMAGES.items():
        image = str(services(compose).get(name, {}).get("image", ""))
        if not re.fullmatch(pattern, image):
            problems.append(f"{name}: image {image!r} does not match {pattern}")
    return problems


def check_dockerfile(compose: dict, dockerfile: str) -> list[str]:
    problems = []
    ins = dockerfile_instructions(dockerfile)
    words = [w for w, _ in ins]
    froms = [args for w, args in ins if w == "FROM"]
    if not froms or froms[0].split()[0] != "python:3.11-slim":
        problems.append(f"base image is {froms[:1]}, expected python:3.11-slim")
    installs = [args for w, args in ins if w == "RUN" and re.search(r"\bpip3? install\b", args)]
    if not any(re.search(r"(^|\s)(-e\s+|--editable\s+)?\.(\s|$)", a) for a in installs):
        problems.append("the Dockerfile does not `pip install` the project (`-e .` or `.`)")
    if [exec_form(a) for w, a in ins if w == "ENTRYPOINT"][-1:] != [["delayq"]]:
        problems.append('ENTRYPOINT is not ["delayq"]')
    if dockerfile_cmd(dockerfile) != ["node"]:
        problems.append('CMD is not ["node"]')
    users = [a for w, a in ins if w == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("the image runs as root")
    exposed = {p.split("/")[0] for w, a in ins if w == "EXPOSE" for p in a.split()}
    for name in NODES:
        port = environment(services(compose).get(name, {})).get("DELAYQ_PORT")
        if port and port not in exposed:
            problems.append(f"{name} listens on {port}, the Dockerfile exposes {sorted(exposed)}")
    if "COPY" not in words and "ADD" not in words:
        problems.append("the Dockerfile copies nothing into the image")
    return problems


CHECKS: dict[str, Check] = {
    "structure": check_structure,
    "env_names": check_env_names,
    "env_values": check_env_values,
    "commands": check_commands,
    "ports": check_ports,
    "depends_on": check_depends_on,
    "nodes": check_nodes,
    "images": check_images,
    "rabbitmq": check_rabbitmq,
    "dockerfile": check_dockerfile,
}


# --- the real files ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE_PATH.read_text()


def test_compose_parses(compose):
    assert isinstance(compose, dict)


@pytest.mark.parametrize("name", CHECKS)
def test_files_pass(name, compose, dockerfile):
    assert CHECKS[name](compose, dockerfile) == []


def test_dockerignore_excludes_local_state():
    patterns = {line.strip().removeprefix("**/") for line in DOCKERIGNORE_PATH.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache"} <= patterns


# --- each check can fail ----------------------------------------------------------------------

def _env(svc: str, **values: str) -> Callable[[dict], None]:
    def mutate(c: dict) -> None:
        env = dict(c["services"][svc].get("environment") or {})
        env.update(values)
        c["services"][svc]["environment"] = env
    return mutate


def _set(svc: str, key: str, value: Any) -> Callable[[dict], None]:
    def mutate(c: dict) -> None:
        c["services"][svc][key] = value
    return mutate


def _drop(svc: str) -> Callable[[dict], None]:
    return lambda c: c["services"].pop(svc)


def _dep(svc: str, dep: str, condition: str) -> Callable[[dict], None]:
    def mutate(c: dict) -> None:
        c["services"][svc]["depends_on"] = {**c["services"][svc]["depends_on"], dep: {"condition": condition}}
    return mutate


def _no_healthcheck(svc: str) -> Callable[[dict], None]:
    return lambda c: c["services"][svc].pop("healthcheck")


BREAKAGES: list[tuple[str, str, Callable[[dict], None] | None, Callable[[str], str] | None]] = [
    ("structure", "missing node3", _drop("node3"), None),
    ("structure", "version key", lambda c: c.update(version="3.8"), None),
    ("env_names", "misspelt setting", _env("node1", DELAYQ_ZK_HOST="zookeeper:2181"), None),
    ("env_values", "log format", _env("node2", DELAYQ_LOG_FORMAT="xml"), None),
    ("env_values", "port not a number", _env("node1", DELAYQ_PORT="ninety"), None),
    ("env_values", "db-init bad bool", _env("db-init", DELAYQ_ZK_ENABLED="maybe"), None),
    ("commands", "unknown sub-command", _set("node1", "command", ["serve"]), None),
    ("commands", "db without init", _set("db-init", "command", ["db", "create"]), None),
    ("commands", "unknown demo option", _set("demo", "command", ["demo", "--count", "5"]), None),
    ("commands", "demo option out of range", _set("demo", "command", ["demo", "--tasks", "0"]), None),
    ("commands", "node without command, CMD wrong", _set("node1", "command", None),
     lambda d: d.replace('CMD ["node"]', 'CMD ["demo"]')),
    ("ports", "duplicate host port", _set("node2", "ports", ["9091:9090"]), None),
    ("ports", "container port differs", _set("node3", "ports", ["9093:9999"]), None),
    ("ports", "DELAYQ_PORT differs", _env("node1", DELAYQ_PORT="9191"), None),
    ("depends_on", "unknown service", _dep("node1", "postgres", "service_healthy"), None),
    ("depends_on", "unknown condition", _dep("node1", "mysql", "service_ready"), None),
    ("depends_on", "healthy without healthcheck", _no_healthcheck("zookeeper"), None),
    ("depends_on", "nodes do not wait for db-init", _dep("node2", "db-init", "service_started"), None),
    ("depends_on", "one-shot job restarted", _set("db-init", "restart", "on-failure"), None),
    ("nodes", "duplicate node id", _env("node3", DELAYQ_NODE_ID="node1"), None),
    ("nodes", "advertise localhost", _env("node2", DELAYQ_ADVERTISE_HOST="127.0.0.1"), None),
    ("nodes", "bind loopback", _env("node1", DELAYQ_HOST="127.0.0.1"), None),
    ("nodes", "no certificate", _env("node2", DELAYQ_TLS_CERT_FILE=""), None),
    ("nodes", "node account elsewhere", _env("node3", DELAYQ_MYSQL_URL_FILE="/elsewhere/url"), None),
    ("nodes", "demo endpoint not a node", _set("demo", "command", ["demo", "--endpoint", "mysql:9090"]), None),
    ("rabbitmq", "guest again", _set("rabbitmq", "environment", {}), None),
    ("rabbitmq", "another vhost", _env("node2", DELAYQ_AMQP_URL="amqp://delayq:compose-development-only@rabbitmq/x"),
     None),
    ("images", "zookeeper 3.9", _set("zookeeper", "image", "zookeeper:3.9"), None),
    ("images", "mysql 5.7", _set("mysql", "image", "mysql:5.7"), None),
    ("images", "rabbitmq without UI", _set("rabbitmq", "image", "rabbitmq:3"), None),
    ("dockerfile", "no install", None, lambda d: re.sub(r"RUN pip install[^\n]*", "RUN true", d)),
    ("dockerfile", "entrypoint", None, lambda d: d.replace('ENTRYPOINT ["delayq"]', 'ENTRYPOINT ["python"]')),
    ("dockerfile", "cmd", None, lambda d: d.replace('CMD ["node"]', 'CMD ["demo"]')),
    ("dockerfile", "root", None, lambda d: re.sub(r"\nUSER [^\n]*", "\n", d)),
    ("dockerfile", "base image", None, lambda d: d.replace("python:3.11-slim", "python:3.12-slim")),
]


@pytest.mark.parametrize("name,what,break_compose,break_dockerfile", BREAKAGES,
                         ids=[f"{b[0]}-{b[1].replace(' ', '_')}" for b in BREAKAGES])
def test_check_catches(name, what, break_compose, break_dockerfile, compose, dockerfile):
    broken = copy.deepcopy(compose)
    if break_compose:
        break_compose(broken)
    broken_df = break_dockerfile(dockerfile) if break_dockerfile else dockerfile
    assert broken != compose or broken_df != dockerfile, f"the breakage {what!r} changed nothing"
    assert CHECKS[name](broken, broken_df), f"check {name} did not notice: {what}"


def test_every_check_has_a_breakage():
    assert {b[0] for b in BREAKAGES} == set(CHECKS)
