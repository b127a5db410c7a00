"""The `epochfs` command: run one service (namenode, datanode, gateway) or a whole local cluster (up / down)."""
from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from epochfs.common import defaults
from epochfs.common.ports import ephemeral_range, in_ephemeral, is_free
from . import admin, objects, transfer

N_DATANODES = 3
N_NAMENODES_HA = 3
N_ETCD = 3


def _service(module: str):
    def run(args) -> int:
        import importlib
        importlib.import_module(f"epochfs.{module}.__main__").main()
        return 0
    return run


def cluster_ports(port: int, ha: bool = False) -> dict:
    """Ports of a local cluster, all derived from the gateway's so that several clusters can run side by side (and
    etcd's stay the same across restarts: its members keep their peers' addresses in their data). `nn`: (HTTP, RPC)
    of each NameNode; `etcd`: (client, peer) of each etcd member (HA only)."""
    nns = N_NAMENODES_HA if ha else 1
    return {"gateway": port, "nn_http": port + 1, "nn_rpc": port + 2,  # the (first) NameNode's
            "nn": [(port + 1 + 2 * i, port + 2 + 2 * i) for i in range(nns)],
            "dn": [(port + 10 + 2 * i, port + 11 + 2 * i) for i in range(N_DATANODES)],
            "etcd": [(port + 20 + 2 * i, port + 21 + 2 * i) for i in range(N_ETCD if ha else 0)]}


ETCD_MAX_REQUEST_BYTES = 8 << 20  # NN_ETCD_MAX_REQUEST_BYTES's default: the NameNodes refuse a larger command


def etcd_argv(etcd: str, host: str, ports: list[tuple[int, int]], i: int, data_dir: Path) -> list[str]:
    """The command line of etcd member `i` (0-based) of `epochfs up --ha`'s etcd cluster."""
    client, peer = ports[i]
    cluster = ",".join(f"etcd{j + 1}=http://{host}:{p}" for j, (_, p) in enumerate(ports))
    return [etcd, "--name", f"etcd{i + 1}", "--data-dir", str(data_dir / f"etcd{i + 1}"),
            "--listen-client-urls", f"http://{host}:{client}", "--advertise-client-urls", f"http://{host}:{client}",
            "--listen-peer-urls", f"http://{host}:{peer}", "--initial-advertise-peer-urls", f"http://{host}:{peer}",
            "--initial-cluster", cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", "epochfs-up", "--logger", "zap", "--log-level", "warn",
            "--max-request-bytes", str(ETCD_MAX_REQUEST_BYTES)]


def etcd_env(base: dict[str, str]) -> dict[str, str]:
    """The environment of an etcd member of `epochfs up --ha`: its Go runtime given its share of the machine's cores
    (the three members share one machine). On 2 cores, GOMAXPROCS=1 cut etcd's CPU per S3 0-byte PUT (16 clients,
    bench/s3_bench.py's PUT 0 on one cluster, members restarted alternately) from 0.285 / 0.359 to 0.260 / 0.273 ms
    (0.78-0.85 of the gateway's CPU to 0.67-0.70); GOGC=400 on top of it did not help (0.31 / 0.26)."""
    return {**base, "GOMAXPROCS": base.get("GOMAXPROCS") or str(max(1, (os.cpu_count() or 1) // N_ETCD))}


def _load_or_create(path: Path, make) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    val = make()
    path.write_text(json.dumps(val, indent=2))
    path.chmod(0o600)
    return val


def _secret_key() -> str:
    """A random secret key that never starts with "-": one that did was taken for an option when passed as
    `--secret-key KEY` (argparse), as scripts and the mount benchmark do."""
    while (key := secrets.token_urlsafe(30)).startswith("-"):
        pass
    return key


def _root_credentials(data_dir: Path) -> dict:
    env_ak, env_sk = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    saved = _load_or_create(data_dir / "credentials.json", lambda: {
        "access_key": env_ak or "EPOCH" + secrets.token_hex(8).upper(),
        "secret_key": env_sk or _secret_key(),
    })
    if env_ak and env_sk:
        return {"access_key": env_ak, "secret_key": env_sk}
    return saved


def wait_ready(url: str, procs: dict, check=lambda j: True, timeout: float = 30.0,
               exited=lambda name, p: f"{name} exited with code {p.returncode} during start-up") -> None:
    """Poll a service's `url` until it answers 200 with JSON that passes `check`; fail at once if one of `procs`
    (name -> Popen) died, with the message `exited` makes. `epochfs up` and the test clusters start services with it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError(exited(name, p))
        try:
            r = httpx.get(url, timeout=1.0)
            if r.status_code == 200 and check(r.json()):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {url}")


def cmd_up(args) -> int:
    if args.detach:
        return _up_detached(args)
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    ports = cluster_ports(args.port, args.ha)
    host = args.host
    etcd = None
    if args.ha:
        etcd = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
        if etcd is None:
            print("epochfs up --ha: etcd is not installed (Debian: apt-get install etcd-server)", file=sys.stderr)
            return 1
    other = data_dir / ("namenode" if args.ha else "namenode1")
    if other.exists():  # the namespace of the other mode would not be seen: never start over silently
        print(f"epochfs up: {data_dir} holds a cluster started {'without' if args.ha else 'with'} --ha ({other}); "
              f"start it the same way, or use another --data-dir", file=sys.stderr)
        return 1
    root = _root_credentials(data_dir)
    secret = _load_or_create(data_dir / "cluster.json", lambda: {"secret": secrets.token_urlsafe(32)})["secret"]
    users = [f"{root['access_key']}:{root['secret_key']}:{root.get('owner_id', '')}:{root.get('name', 'root')}"]
    users += list(args.user or [])
    base_env = {**os.environ, "EPOCHFS_CLUSTER_SECRET": secret}
    common = {"CLUSTER_SECRET": secret, "HOST": host, "LOG_LEVEL": args.log_level}

    def env(prefix: str, **kw) -> dict:
        e = dict(base_env)
        for k, v in {**common, **kw}.items():
            e[f"{prefix}{k.upper()}"] = str(v)
        return e

    def service(module: str) -> list[str]:
        return [sys.executable, "-m", module]

    specs = []  # (name, argv, env) in start order; stopped in the reverse order
    nn_args = dict(block_size=args.block_size, replication=args.replication)
    if args.ha:
        # etcd first (the NameNodes' journal and lock), then 3 NameNodes that elect one of them through it
        for i in range(N_ETCD):
            specs.append((f"etcd{i + 1}", etcd_argv(etcd, host, ports["etcd"], i, data_dir), etcd_env(base_env)))
        ha = dict(etcd_endpoints=",".join(f"http://{host}:{c}" for c, _ in ports["etcd"]), advertise_host=host)
        for i, (http, rpc) in enumerate(ports["nn"], 1):
            specs.append((f"namenode{i}", service("epochfs.namenode"),
                          env("NN_", port=http, rpc_port=rpc, data_dir=data_dir / f"namenode{i}", name=f"nn{i}",
                              **ha, **nn_args)))
    else:
        http, rpc = ports["nn"][0]
        specs.append(("namenode", service("epochfs.namenode"),
                      env("NN_", port=http, rpc_port=rpc, data_dir=data_dir / "namenode", **nn_args)))
    nn_addrs = ",".join(f"{host}:{rpc}" for _, rpc in ports["nn"])  # every NameNode: clients follow the active one
    for i, (http, rpc) in enumerate(ports["dn"], 1):
        specs.append((f"datanode{i}", service("epochfs.datanode"),
                      env("DN_", port=http, rpc_port=rpc, data_dir=data_dir / f"datanode{i}", namenode=nn_addrs)))
    master = data_dir / "sse-master.key"  # wraps SSE-S3/KMS data keys; the gateway's alone (never a DataNode's)
    if not master.exists():
        master.touch(mode=0o600)
        master.write_text(base64.b64encode(secrets.token_bytes(32)).decode())
    specs.append(("gateway", service("epochfs.gateway"),
                  env("GW_", port=ports["gateway"], namenode=nn_addrs, users=",".join(users),
                      sse_master_key_file=master)))

    last = args.port + (25 if args.ha else 15)  # the services' ports are args.port to last (cluster_ports)
    busy = [p for p in [ports["gateway"], *(p for pair in ports["nn"] + ports["dn"] + ports["etcd"] for p in pair)]
            if not is_free(host, p)]
    if busy:
        print(f"epochfs up: port(s) {', '.join(map(str, busy))} on {host} are in use (another cluster? pick "
              f"another --port; the services use ports {args.port} to {last})",
              file=sys.stderr)
        return 1
    if in_ephemeral(args.port, last):
        lo, hi = ephemeral_range()
        print(f"epochfs up: warning: ports {args.port} to {last} meet the kernel's range for outgoing connections "
              f"({lo}-{hi}), which may take one before its service binds it; a --port below {lo - 26} avoids that",
              file=sys.stderr)
    children = [Child(name, argv, e, data_dir / "logs" / f"{name}.log") for name, argv, e in specs]
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    (data_dir / "up.pid").write_text(str(os.getpid()))
    procs: dict[str, subprocess.Popen] = {}  # those started so far
    nn_health = [f"http://{host}:{http}/healthz" for http, _ in ports["nn"]]
    try:
        for c in children:
            procs[c.name] = c.start()
            if c.name == f"etcd{N_ETCD}":  # members wait for each other: all started, then all healthy
                for client, _ in ports["etcd"]:
                    wait_ready(f"http://{host}:{client}/health", procs, lambda j: j.get("health") == "true", 60)
            if c.name == "namenode":
                wait_ready(nn_health[0], procs)
            elif c.name == f"namenode{N_NAMENODES_HA}":  # all started: one of them is elected and serves
                wait_any_ready(nn_health, procs, lambda j: True, timeout=60)
        wait_ready(f"http://{host}:{ports['gateway']}/healthz", procs)
        wait_any_ready(nn_health, procs, lambda j: j.get("nodes", 0) >= N_DATANODES)  # the active one's
        endpoint = f"http://{host}:{ports['gateway']}"
        print(f"export AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID={root['access_key']} "
              f"AWS_SECRET_ACCESS_KEY={root['secret_key']} AWS_DEFAULT_REGION=us-east-1", flush=True)
        ha_note = (f", NameNodes {nn_addrs}, etcd {','.join(f'http://{host}:{c}' for c, _ in ports['etcd'])}"
                   if args.ha else "")
        print(f"# epochfs is up: S3 endpoint {endpoint}{ha_note}, data in {data_dir}, logs in {data_dir / 'logs'}; "
              "Ctrl-C stops it", file=sys.stderr, flush=True)
        while not stopping:
            for c in children:
                if not stopping:
                    c.supervise(time.monotonic())
            time.sleep(0.2)
    except RuntimeError as e:
        print(f"epochfs up: {e} (logs in {data_dir / 'logs'})", file=sys.stderr)
        stop_all({c.name: c.proc for c in children if c.proc is not None})
        (data_dir / "up.pid").unlink(missing_ok=True)
        return 1
    stop_all({c.name: c.proc for c in children})  # the current process of each (restarts replace them)
    (data_dir / "up.pid").unlink(missing_ok=True)
    print("# epochfs stopped", file=sys.stderr)
    return 0


def wait_any_ready(urls: list[str], procs: dict, check, timeout: float = 30.0) -> None:
    """wait_ready until one of `urls` passes `check` (HA: the active NameNode is the one DataNodes report to)."""
    deadline = time.monotonic() + timeout
    while True:
        for url in urls:
            try:
                wait_ready(url, procs, check, timeout=0.2)
                return
            except RuntimeError:
                if any(p.poll() is not None for p in procs.values()):
                    raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for one of {', '.join(urls)}")


class RestartDelay:
    """How long `epochfs up` waits before starting a child that exited again: first_s, doubling up to max_s for a
    child that keeps crashing; one that ran stable_s or longer before it exited starts over at first_s."""

    def __init__(self, first_s: float = 0.5, max_s: float = 30.0, stable_s: float = 30.0) -> None:
        self.first_s, self.max_s, self.stable_s = first_s, max_s, stable_s
        self._next = first_s

    def after_exit(self, ran_s: float) -> float:
        if ran_s >= self.stable_s:
            self._next = self.first_s
        delay, self._next = self._next, min(self._next * 2, self.max_s)
        return delay


class Child:
    """One service of `epochfs up`: started, and started again (after a RestartDelay) whenever it exits."""

    def __init__(self, name: str, argv: list[str], env: dict, log_path: Path) -> None:
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_path
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.due: float | None = None  # when a restart is pending: its time
        self.delay = RestartDelay()

    def start(self) -> subprocess.Popen:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.started, self.due = time.monotonic(), None
        return self.proc

    def supervise(self, now: float) -> None:
        """Notice an exit (and plan the restart) or start the child again when its restart is due."""
        if self.due is None:
            code = self.proc.poll()
            if code is None:
                return
            delay = self.delay.after_exit(now - self.started)
            self.due = now + delay
            self._note(f"{self.name} exited with code {code}{_signal_name(code)}; restarting it in {delay:g} s "
                       f"(see {self.log_path})")
        elif now >= self.due:
            self.start()
            self._note(f"{self.name} restarted (pid {self.proc.pid})")

    def _note(self, text: str) -> None:
        """Said on `epochfs up`'s stderr (data_dir/up.out with --detach) and in the child's own log."""
        print(f"# {text}", file=sys.stderr, flush=True)
        with open(self.log_path, "a") as log:
            log.write(f"# epochfs up: {text}\n")


def _signal_name(code: int) -> str:
    try:
        return f" ({signal.Signals(-code).name})" if code < 0 else ""
    except ValueError:
        return ""


def stop_all(procs: dict) -> None:
    """SIGTERM to every process of `procs` (name -> Popen, in start order) at once, the last started first (gateway
    first: no new requests; NameNode last), then SIGKILL to what is still running 15 s later. A stopped process
    (SIGSTOP) is continued, else it would wait out the 15 s."""
    for name in reversed(list(procs)):
        p = procs[name]
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _up_detached(args) -> int:
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    out = data_dir / "up.out"
    argv = [a for a in sys.argv[1:] if a not in ("-d", "--detach")]
    with open(out, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "epochfs.frontends.cli.main", *argv], stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = out.read_text()
        for line in text.splitlines():
            if line.startswith("export AWS_ENDPOINT_URL="):
                print(line)
                print(f"# epochfs runs in the background (pid {p.pid}); stop it with: epochfs down --data-dir "
                      f"{data_dir}", file=sys.stderr)
                return 0
        if p.poll() is not None:
            print(text, file=sys.stderr)
            return 1
        time.sleep(0.1)
    print("epochfs up: timed out waiting for the cluster", file=sys.stderr)
    return 1


def cmd_down(args) -> int:
    pid_file = Path(args.data_dir).resolve() / "up.pid"
    if not pid_file.exists():
        print(f"epochfs down: no cluster running from {pid_file.parent}", file=sys.stderr)
        return 1
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return 0
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.1)
    print("epochfs down: the cluster did not stop within 30 s", file=sys.stderr)
    return 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="epochfs", description="epochfs: storage for deep-learning training data")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("namenode", "run a NameNode (settings from NN_* variables)"),
                        ("datanode", "run a DataNode (settings from DN_* variables)"),
                        ("gateway", "run the S3 gateway (settings from GW_* variables)")):
        sub.add_parser(name, help=help_).set_defaults(func=_service(name))
    up = sub.add_parser("up", help="run a local cluster: NameNode, 3 DataNodes and the S3 gateway")
    up.add_argument("--data-dir", default="./epochfs-data")
    up.add_argument("--port", type=int, default=defaults.PORT, help="S3 port; the services use the next ones")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--user", action="append", metavar="ACCESS:SECRET[:OWNER_ID[:NAME[:EMAIL]]]",
                    help="an extra S3 user (repeatable); ACL grants by emailAddress resolve to it by EMAIL")
    up.add_argument("--block-size", type=int, default=defaults.BLOCK_SIZE,
                    help="default block size of new buckets, in bytes (a multiple of 64 KiB, 64 KiB to 32 MiB)")
    up.add_argument("--replication", type=int, default=defaults.REPLICATION)
    up.add_argument("--log-level", default="info")
    up.add_argument("--ha", action="store_true",
                    help="NameNode high availability: a 3-member etcd cluster (Debian's etcd-server) and 3 NameNodes, "
                         "one active; DataNodes and the gateway follow the active one")
    up.add_argument("-d", "--detach", action="store_true", help="run in the background; print the exports and exit")
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down", help="stop a cluster started with `epochfs up --detach`")
    down.add_argument("--data-dir", default="./epochfs-data")
    down.set_defaults(func=cmd_down)
    admin.add_parser(sub)
    transfer.add_parser(sub)
    objects.add_parser(sub)
    mount = sub.add_parser("mount", help="mount buckets (or BUCKET[/PREFIX]) as a POSIX file system (FUSE)")
    mount.set_defaults(func=_fuse("cmd_mount"))
    umount = sub.add_parser("umount", help="unmount an `epochfs mount`")
    umount.add_argument("mountpoint")
    umount.add_argument("-l", "--lazy", action="store_true", help="detach now, clean up when no longer busy")
    umount.set_defaults(func=_fuse("cmd_umount"))
    _add_mount_arguments(mount)
    return ap


def _fuse(name: str):
    """A mount command, imported on use: pyfuse3 needs libfuse3, which the other commands don't."""
    def run(args) -> int:
        from epochfs.frontends.fuse import mount
        return getattr(mount, name)(args)
    return run


def _add_mount_arguments(p: argparse.ArgumentParser) -> None:
    from epochfs.frontends.fuse.options import add_arguments
    add_arguments(p)


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # `epochfs` alone: what it can do, not argparse's complaint
        ap.print_help(sys.stderr)
        sys.exit(2)
    args = ap.parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
