"""Measuring on a fleet: MetaSchedule's RPCRunner over the servers a TVM RPC tracker holds for a key.

Candidates are built here (our builder, device code compiled here), so a server only uploads the
artifact, loads it and times it with the evaluator settings the local runner uses. As many
candidates are measured at once as the tracker holds servers for the key when a batch starts
(RPCRunner's pool); each one opens its own session, so arguments are filled once a candidate, not
once a task as the local runner does (docs/distributed.md measures the cost).

Faults: a server that dies costs the candidates it held (run errors); the others go on; so does
one that hangs, once the tracker's ``timeout_s`` has passed (TVM 0.27 sets no limit). A batch
waits on the tracker for a free server, so with none left it would wait forever: ``FleetRunner``
stops the call instead, with one line (``NoServerLeft``), the records measured so far kept; so it
does when the tracker stops answering (TVM's client would retry each connection for a minute).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from typing import Optional, Union

from tvm import rpc
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import PyRunner, rpc_runner
from tvm.support.popen_pool import PopenPoolExecutor

from ..builder import rpc_alloc_argument, target_device_type
from ..errors import UserError
from .interrupt import stop_now

SESSION_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0  # a tracker's host that does not answer at all
TRACKER_MAGIC = struct.pack("<i", rpc.base.RPC_TRACKER_MAGIC)
WAIT_S = 0.05  # how often a batch's futures are looked at
ENVIRONMENT = ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY")


def add_rpc_option(parser, what: str) -> None:
    """``--rpc [HOST:PORT:KEY]`` and ``--rpc-timeout`` on a command's parser (``tracker_of`` reads
    them); ``what`` says what the command does on the servers."""
    parser.add_argument("--rpc", nargs="?", const="", default=None, metavar="HOST:PORT:KEY",
                        help=f"{what}; without a value, from TVM_TRACKER_HOST/PORT/KEY (docs/distributed.md)")
    parser.add_argument("--rpc-timeout", type=float, default=None, metavar="SECONDS",
                        help=f"with --rpc: the most a candidate (or a check's kernel, a model's run) may take on a "
                             f"server, the wait for a free one included (default {SESSION_TIMEOUT_S:g})")


def tracker_of(args) -> Optional["Tracker"]:
    """The tracker a command's ``--rpc`` and ``--rpc-timeout`` name, None without ``--rpc``."""
    if args.rpc is None:
        if args.rpc_timeout is not None:
            raise UserError("--rpc-timeout goes with --rpc HOST:PORT:KEY")
        return None
    return Tracker.parse(args.rpc, SESSION_TIMEOUT_S if args.rpc_timeout is None else args.rpc_timeout)


class NoServerLeft(KeyboardInterrupt):
    """Tuning stopped: the tracker holds no server for the key (a KeyboardInterrupt, so tuning
    stops as on Ctrl-C: at a safe point, every measured record kept)."""


@dataclasses.dataclass(frozen=True)
class Tracker:
    """A TVM RPC tracker and the key its measuring servers registered under. ``timeout_s`` bounds
    each use of a server, the wait for a free one included: a candidate's measurement (a run error
    past it), a check's kernel, a model's run, the device check (one line past it)."""

    host: str
    port: int
    key: str
    timeout_s: float = SESSION_TIMEOUT_S

    @classmethod
    def of(cls, rpc: Union[str, "Tracker"]) -> "Tracker":
        """The API's ``rpc=``: a Tracker as it is, a text as ``parse`` reads it."""
        return rpc if isinstance(rpc, Tracker) else cls.parse(rpc)

    @classmethod
    def parse(cls, text: str, timeout_s: float = SESSION_TIMEOUT_S) -> "Tracker":
        """``HOST:PORT:KEY``; an empty text takes them from ``TVM_TRACKER_HOST``/``_PORT``/``_KEY``."""
        if not text:
            missing = [name for name in ENVIRONMENT if not os.environ.get(name)]
            if missing:
                raise UserError(f"--rpc without HOST:PORT:KEY needs {', '.join(missing)} set")
            text = ":".join(os.environ[name] for name in ENVIRONMENT)
        host, _, rest = text.partition(":")
        port, _, key = rest.partition(":")
        if not host or not port.isdigit() or not key:
            raise UserError(f"--rpc takes HOST:PORT:KEY (e.g. 127.0.0.1:9190:h100), not '{text}'")
        if not timeout_s > 0:
            raise UserError(f"--rpc-timeout must be positive, got {timeout_s:g}")
        return cls(host, int(port), key, float(timeout_s))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}:{self.key}"

    def servers(self) -> int:
        """How many servers the tracker holds for the key, busy or free."""
        return self.servers_by_key()[self.key]

    def servers_by_key(self) -> collections.Counter:
        """How many servers the tracker holds under each key (``query_rpc_tracker``'s list)."""
        summary = self._summary()
        return collections.Counter(server.get("key", "").partition("server:")[2]
                                   for server in summary.get("server_info", []))

    def _summary(self) -> dict:
        """The tracker's summary (its servers and queue), asked in one session whose every step has a
        limit. TVM's client retries a refused connection for a minute, with a warning every 5 s
        (``connect_with_retry``: made for a tracker that restarts), and waits on a stopped tracker
        without end; here a mistyped address, or a tracker that hangs, is one line at once."""
        where = f"{self.host}:{self.port}"
        try:
            with socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S) as sock:
                sock.sendall(TRACKER_MAGIC)
                try:
                    magic = rpc.base.recvall(sock, len(TRACKER_MAGIC))
                except TimeoutError:
                    raise
                except OSError:
                    magic = b""  # an RPC server closes a session that opens with another magic
                if magic != TRACKER_MAGIC:
                    raise UserError(f"what answers at {where} is not a TVM RPC tracker (a server's port?): "
                                    "correct --rpc HOST:PORT:KEY")
                rpc.base.sendjson(sock, [rpc.base.TrackerCode.SUMMARY])
                code, answer = rpc.base.recvjson(sock)
        except (OSError, ValueError, struct.error) as err:
            raise UserError(f"no RPC tracker answers at {where} ({getattr(err, 'strerror', None) or err}): start "
                            f"one there (python -m tvm.exec.rpc_tracker --port {self.port}) or correct --rpc "
                            "HOST:PORT:KEY") from err
        if code != rpc.base.TrackerCode.SUCCESS:
            raise UserError(f"the RPC tracker at {where} gave no summary of its servers: {answer}")
        return answer

    def rpc_config(self):
        return ms.runner.RPCConfig(tracker_host=self.host, tracker_port=self.port, tracker_key=self.key,
                                   session_priority=1, session_timeout_sec=self.timeout_s)

    def on_a_server(self, use):
        """``use(session)`` in a session with one of the key's servers, or one line when it has not
        returned within ``timeout_s``, the wait for a free server included: a server that hangs
        (stopped, its connection kept) answers neither a session's handshake nor a call on it, and
        TVM's client sets no limit on either."""
        return answered(lambda: use(self.rpc_config().connect_server()), self.timeout_s,
                        f"no server under key '{self.key}' at {self.host}:{self.port} was done within "
                        f"{self.timeout_s:g} s: all were busy, or the one given hangs (restart it or take it "
                        "off the key; --rpc-timeout gives longer)")

    def run_loaded(self, artifact: str, device_type: str, use):
        """``use(module, device)`` with ``artifact`` (an exported library, device code compiled)
        uploaded to one of the key's servers and loaded there, in a session of its own, removed
        afterwards; all of it within ``timeout_s`` (``on_a_server``)."""
        def loaded(session):
            remote_path = f"ms_pruner_{uuid.uuid4().hex}.tar"
            try:
                return use(rpc_runner.default_upload_module(session, artifact, remote_path),
                           session.device(device_type, 0))
            finally:
                rpc_runner.default_cleanup(session, remote_path)
        return self.on_a_server(loaded)

    def check_device(self, target) -> int:
        """The number of servers, once one of them has shown a device ``target`` can run on: a CUDA
        device of the target's compute capability for a CUDA target, a CPU for ``llvm``."""
        held = self.servers_by_key()
        count = held[self.key]
        if count == 0:
            others = ", ".join(f"'{key}' ({n})" for key, n in sorted(held.items())) or "none"
            raise UserError(f"the RPC tracker at {self.host}:{self.port} holds no server for key '{self.key}'; "
                            f"servers by key: {others}")
        device_type = target_device_type(target)
        present, version = self.on_a_server(lambda session: _device_facts(session, device_type))
        kind = target.kind.name
        if not present:
            raise UserError(f"the servers under key '{self.key}' have no {kind} device; target {kind} refused")
        if kind == "cuda":
            wanted = "".join(ch for ch in str(target.attrs.get("arch", "")) if ch.isdigit())
            found = version.replace(".", "")
            if wanted and wanted != found:
                raise UserError(f"the servers under key '{self.key}' run sm_{found}; the target is "
                                f"{target.attrs.get('arch')}: tune for their GPU or use another key")
        return count


def _device_facts(session, device_type: str):
    """(whether the session's server has a device of ``device_type``, its compute version or "")."""
    try:
        device = session.device(device_type, 0)
        present = device.exist
    except Exception:  # pylint: disable=broad-except
        return False, ""  # a runtime built without that device type raises instead
    return present, str(device.compute_version) if present and device_type == "cuda" else ""


def answered(call, timeout_s: float, silence: str):
    """``call()``, or UserError(``silence``) when it has not returned within ``timeout_s``; a call
    that never returns (on a server that hangs) is left behind in a daemon thread."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as err:  # pylint: disable=broad-except
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise UserError(silence)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@derived_object
class FleetRunner(PyRunner):
    """``RPCRunner`` over a tracker's servers that stops the call when the tracker holds none, or
    no longer answers. Unless ``fixed_workers`` is given, each batch measures as many candidates at
    once as the key has servers when it starts, so a server added to a long tune takes work from the
    next batch on, and one gone leaves no candidate waiting for it. ``workers``: the size of the
    pool in use, None while there is none (before the first batch, after a stop)."""

    def __init__(self, tracker: Tracker, inner, fixed_workers: Optional[int] = None, poll_s: float = 1.0,
                 grace_s: float = 5.0):
        super().__init__()
        self.tracker = tracker
        self.inner = inner
        self.fixed_workers = fixed_workers
        self.workers: Optional[int] = None
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.unanswered = False

    def run(self, runner_inputs):
        servers = self._servers()
        if servers == 0:
            raise self._gone()
        wanted = self.fixed_workers or servers
        if wanted != self.workers:
            self.inner.pool.shutdown(wait=False)  # idle between batches
            self.inner.pool, self.workers = candidate_pool(wanted, self.tracker.timeout_s), wanted
        futures = self.inner.run(runner_inputs)
        lost_since, asked = None, time.monotonic()
        while not all(future.done() for future in futures):
            time.sleep(WAIT_S)  # the batch's end is seen at once; the tracker is asked every poll_s
            if time.monotonic() - asked < self.poll_s:
                continue
            asked = time.monotonic()
            if self._servers() > 0:
                lost_since = None
            elif lost_since is None:
                lost_since = asked
            elif asked - lost_since > self.grace_s:
                raise self._gone()
        return futures

    def _servers(self) -> int:
        """The key's servers, 0 while the tracker does not answer (``unanswered``)."""
        try:
            count, self.unanswered = self.tracker.servers(), False
        except UserError:
            count, self.unanswered = 0, True
        return count

    def _gone(self) -> NoServerLeft:
        """The stop to raise: on its way out of MetaSchedule's C++ the FFI turns it into a
        RuntimeError, and ``graceful_interrupts`` gives it back. The runner's workers, each waiting
        on the tracker for a server, are stopped: one that got a server later would measure for
        nobody; a later batch makes a new pool."""
        self.inner.pool.shutdown(wait=False)
        self.workers = None
        where = f"{self.tracker.host}:{self.tracker.port}"
        what, needed = (f"the RPC tracker at {where} no longer answers", "it") if self.unanswered else \
            (f"no RPC server left for key '{self.tracker.key}' at {where}", "a server")
        return stop_now(NoServerLeft(f"{what}; records measured so far are kept, rerun with {needed} up to resume"))


def make_fleet_runner(tracker: Tracker, target, number: int = 3, repeat: int = 1, min_repeat_ms: int = 100,
                      workers: Optional[int] = None):
    """A FleetRunner measuring on ``tracker``'s servers with the local runner's evaluator settings,
    once the servers' device was checked against ``target``; ``workers`` fixes how many candidates
    are measured at once, else each batch takes the key's servers then.
    A candidate not measured within the tracker's ``timeout_s`` (its server hangs) is a run error."""
    tracker.check_device(target)
    config = ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                       enable_cpu_cache_flush=False)
    inner = ms.runner.RPCRunner(rpc_config=tracker.rpc_config(), evaluator_config=config,
                                f_alloc_argument=rpc_alloc_argument)
    inner.pool.shutdown(wait=False)  # started no worker yet; each batch's pool is FleetRunner's
    return FleetRunner(tracker, inner, workers)


def candidate_pool(workers: int, timeout_s: float) -> PopenPoolExecutor:
    """RPCRunner's pool with a limit a candidate, the wait for a free server included, as earlier TVM
    RPCRunners had: 0.27's has none, so a server that hangs (stopped, its connection kept open) held
    its candidate's worker, and the round, forever. Past ``timeout_s`` the worker is killed and the
    candidate is a run error ("RPCRunner: Timeout, killed after ..."); the tracker hands that server
    to nobody else until it registers again."""
    return PopenPoolExecutor(max_workers=workers, timeout=timeout_s)


class LocalFleet:
    """A tracker and ``servers`` RPC servers on this machine (loopback), each a process of its own:
    for trying a fleet set-up, and for the tests and benchmarks of this module. Logs go to
    ``log_dir`` (``tracker.log``, ``server<i>.log``)."""

    def __init__(self, log_dir: str, key: str = "local", servers: int = 1):
        self.log_dir, self.key = log_dir, key
        self.port = _free_port()
        self.servers: list = []
        self.tracker_process = self._start("tracker", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                                           "--port", str(self.port), "--port-end", str(self.port + 1))
        self.tracker = Tracker("127.0.0.1", self.port, key)
        self._wait(self._listening)  # a server started sooner retries its connection every 5 s
        for _ in range(servers):
            self.add_server(wait=False)
        self._wait(self._all_registered)

    def add_server(self, wait: bool = True):
        base = _free_port()
        server = self._start(f"server{len(self.servers)}", "tvm.exec.rpc_server", "--tracker",
                             f"127.0.0.1:{self.port}", "--key", self.key, "--host", "127.0.0.1", "--port", str(base),
                             "--port-end", str(base + 50))
        self.servers.append(server)
        if wait:
            self._wait(self._all_registered)
        return server

    def kill(self, process) -> None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def close(self) -> None:
        for process in self.servers + [self.tracker_process]:
            if process.poll() is None:
                self.kill(process)

    def __enter__(self) -> "LocalFleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _listening(self) -> bool:
        if self.tracker_process.poll() is not None:
            raise UserError(f"the local RPC tracker exited; see {os.path.join(self.log_dir, 'tracker.log')}")
        return self._registered() is not None

    def _all_registered(self) -> bool:
        return self._registered() == sum(1 for s in self.servers if s.poll() is None)

    def _registered(self) -> Optional[int]:
        """The servers the tracker holds for the key; None while it does not answer yet."""
        try:
            return self.tracker.servers()
        except UserError:
            return None

    def _start(self, name: str, module: str, *args):
        log = open(os.path.join(self.log_dir, f"{name}.log"), "w")  # pylint: disable=consider-using-with
        return subprocess.Popen([sys.executable, "-m", module, *args], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    @staticmethod
    def _wait(condition, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise UserError("the local RPC tracker or a server did not come up within a minute")
            time.sleep(0.2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
