"""LLVM IR -> library bytes with llvmlite alone, in this process or in a helper process.

`compile_ir(src, machine)` is the whole of the LLVM device's compiler (runtime/llvm.py): parse the
IR into an LLVM context of its own, verify it, run the new pass manager's default pipeline at
`OPT_LEVEL`, rename every external function `<name>__<digest>`, emit the object file. The library is
`LIBRARY_MAGIC`, the 16-character source digest, then the object.

llvmlite runs one C call at a time per process (its own global lock), so two compiles in one process
never overlap. `Helper` is a second process that runs this file as a script: it imports the
standard library and llvmlite only, never `fast` (it starts in about 0.1 s), builds its target
machine from the settings on its command line (`MachineSettings`: triple, CPU, features,
optimisation level, relocation and code model, the ones the parent's compiler identity names) and
compiles each request with `compile_ir`, so its bytes are an in-process compile's bytes. With it,
two LLVM kernels compile at once (runtime/llvm.py: the second concurrent compile goes to the helper).

Protocol, on the helper's stdin and stdout: a request is an 8-byte little-endian length and the IR
in UTF-8; a reply is one status byte (0: the library follows; 1: an error message follows), an
8-byte length and the payload. The helper ends at EOF on its stdin, so it never outlives its
parent's end of the pipe; the parent also closes it at exit (`shared_helper`'s atexit hook).
"""
from __future__ import annotations

import atexit
import hashlib
import os
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Any

LIBRARY_MAGIC = b"FASTLLVM1\0"
DIGEST_CHARS = 16
OPT_LEVEL = 2
RELOC, CODE_MODEL = "pic", "default"
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class MachineSettings:
    """Everything the target machine is made from (all text, so it fits a command line)."""

    triple: str
    cpu: str
    features: str
    opt: int = OPT_LEVEL
    reloc: str = RELOC
    code_model: str = CODE_MODEL

    def machine(self) -> Any:
        """A new llvmlite TargetMachine with these settings."""
        import llvmlite.binding as llvm

        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=self.opt,
                                            reloc=self.reloc, codemodel=self.code_model)


def compile_ir(src: str, machine: Any, opt: int = OPT_LEVEL) -> bytes:
    """The library for LLVM IR `src` (module docstring); RuntimeError naming the IR when it is invalid."""
    import llvmlite.binding as llvm

    context = llvm.create_context()  # the module's own: compiles on other threads share no context
    try:
        module = llvm.parse_assembly(src, context)
        module.verify()
    except RuntimeError as error:
        raise RuntimeError(f"LLVM: invalid IR: {error}\n--- source ---\n{src}") from error
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=opt))
    builder.getModulePassManager().run(module, builder)
    digest = hashlib.sha256(src.encode()).hexdigest()[:DIGEST_CHARS]
    for function in module.functions:
        if not function.is_declaration and function.linkage == llvm.Linkage.external:
            function.name = f"{function.name}__{digest}"
    return LIBRARY_MAGIC + digest.encode() + bytes(machine.emit_object(module))


class HelperError(RuntimeError):
    """The helper process cannot answer (it did not start, or it died); the caller compiles itself."""


def _read_exactly(stream: IO[bytes], count: int) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise HelperError("llvm_build helper: the pipe closed mid-message")
    return data


class Helper:
    """A helper process (module docstring); `compile` is one request at a time."""

    def __init__(self, settings: MachineSettings) -> None:
        command = [sys.executable, os.path.abspath(__file__), settings.triple, settings.cpu, settings.features,
                   str(settings.opt), settings.reloc, settings.code_model]
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as error:
            raise HelperError(f"llvm_build helper: cannot start {sys.executable}: {error}") from error
        self.lock = threading.Lock()

    def compile(self, src: str) -> bytes:
        """The library for `src`, compiled by the helper; RuntimeError for invalid IR, HelperError
        when the helper cannot answer."""
        data = src.encode()
        with self.lock:
            stdin, stdout = self.process.stdin, self.process.stdout
            if stdin is None or stdout is None or self.process.poll() is not None:
                raise HelperError("llvm_build helper: the process has ended")
            try:
                stdin.write(_LENGTH.pack(len(data)) + data)
                stdin.flush()
                status = _read_exactly(stdout, 1)
                payload = _read_exactly(stdout, _LENGTH.unpack(_read_exactly(stdout, _LENGTH.size))[0])
            except (OSError, ValueError) as error:
                raise HelperError(f"llvm_build helper: {error}") from error
        if status != b"\0":
            raise RuntimeError(payload.decode(errors="replace"))
        return payload

    def close(self) -> None:
        """End the helper (EOF on its stdin, then a kill if it lingers)."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


_HELPERS: dict[tuple[int, MachineSettings], Helper | None] = {}  # (pid, settings) -> helper, None: failed
_HELPERS_LOCK = threading.Lock()


def shared_helper(settings: MachineSettings) -> Helper | None:
    """This process's helper for `settings` (started on first use), or None when it cannot start. Keyed
    by process id too: a forked child never writes to its parent's pipe."""
    key = (os.getpid(), settings)
    with _HELPERS_LOCK:
        if key not in _HELPERS:
            try:
                helper: Helper | None = Helper(settings)
            except HelperError:
                helper = None
            _HELPERS[key] = helper
            if helper is not None:
                atexit.register(helper.close)
        return _HELPERS[key]


def forget_helper(settings: MachineSettings, helper: Helper) -> None:
    """Drop a helper that failed (the next concurrent compile starts a new one)."""
    with _HELPERS_LOCK:
        if _HELPERS.get((os.getpid(), settings)) is helper:
            del _HELPERS[(os.getpid(), settings)]
    helper.close()


def close_helpers() -> None:
    """End this process's helpers now (their CPU time then counts as a finished child's)."""
    with _HELPERS_LOCK:
        helpers = [helper for (pid, _), helper in _HELPERS.items() if pid == os.getpid() and helper is not None]
        for key in [key for key in _HELPERS if key[0] == os.getpid()]:
            del _HELPERS[key]
    for helper in helpers:
        helper.close()


def _serve(arguments: list[str]) -> None:
    """The helper's loop: requests from stdin, replies to stdout, until EOF."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple, cpu, features, opt, reloc, code_model = arguments
    settings = MachineSettings(triple, cpu, features, int(opt), reloc, code_model)
    machine = settings.machine()
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while header := requests.read(_LENGTH.size):
        src = _read_exactly(requests, _LENGTH.unpack(header)[0]).decode()
        try:
            status, payload = b"\0", compile_ir(src, machine, settings.opt)
        except Exception as error:  # every failure goes back to the caller, which raises it
            status, payload = b"\1", str(error).encode()
        replies.write(status + _LENGTH.pack(len(payload)) + payload)
        replies.flush()


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder (fast/runtime) must not shadow other modules
    _serve(sys.argv[1:])
