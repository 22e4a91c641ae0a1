"""The LLVM IR of the worker crew's native loops (fast/runtime/native_loops.py compiles it once per
process): polling with bounded pauses, the calling loops, claiming tasks from the board, running a
kernel sequence on the caller, and a worker's serving loop. The board layout and the claim protocol
are described in native_loops.py's docstring; the constants below fix the layout.

Invariants: a task is claimed only by a compare-and-swap on the `CLAIM` word (acquire/release);
`DONE` is reset before a job is published and then grows only by atomic adds; the job's other words
are plain stores made before the `CLAIM` word is published with a release store, and plain loads
made after a successful claim; a calling loop passes at most `MAX_NATIVE_ARGS` int64 parameters.
"""
from __future__ import annotations

CALIBRATION_POLLS = 20_000  # polls timed once per process to convert microseconds to polls
MAX_NATIVE_ARGS = 40  # a kernel with more parameters runs its share as a Python call
YIELD_EVERY = 64  # polls between two sched_yield calls while polling
MAX_TASKS = 0xFFFF  # tasks of one board job (16 bits of the claim word)
CLAIM, DONE, MODE, CALL, COUNT, ARGS = 0, 1, 2, 3, 4, 5  # board words (CHUNKS mode)
TABLE = 3  # BATCHES mode: the offsets of the tasks' call lists start here
CHUNKS, BATCHES = 0, 1  # values of MODE
POSTED, FINISHED = 0, 1  # a worker's own words (Python jobs)


def _switch(label: str, count_reg: str, words: str, first: str, extra: tuple[str, ...]) -> tuple[str, str]:
    """(switch cases, call blocks) calling `%f` with 0..N int64 arguments read from `words` at
    `first` (plus the `extra` registers), each block branching to `%{label}_after`."""
    top = MAX_NATIVE_ARGS - len(extra)
    cases = " ".join(f"i64 {count}, label %{label}{count}" for count in range(top + 1))
    blocks = []
    for count in range(top + 1):
        loads = [f"  %{label}i{count}_{k} = add i64 {first}, {k}\n"
                 f"  %{label}p{count}_{k} = getelementptr i64, ptr {words}, i64 %{label}i{count}_{k}\n"
                 f"  %{label}a{count}_{k} = load i64, ptr %{label}p{count}_{k}, align 8\n" for k in range(count)]
        arguments = ", ".join([f"i64 %{label}a{count}_{k}" for k in range(count)] + [f"i64 {e}" for e in extra])
        blocks.append(f"{label}{count}:\n{''.join(loads)}  call void %f({arguments})\n  br label %{label}_after")
    return f"switch i64 {count_reg}, label %{label}_after [ {cases} ]", "\n".join(blocks)


def _calls_ir() -> str:
    """`fast_calls(words, pos, ncalls)`: run `ncalls` calls listed from `words[pos]`;
    `fast_chunk(board, core, cores)`: the CHUNKS call with `core, cores` appended."""
    switch, blocks = _switch("callcase", "%n", "%words", "%base", ())
    chunk_switch, chunk_blocks = _switch("chunkcase", "%count", "%board", f"{ARGS}", ("%core", "%cores"))
    return f"""
define void @fast_calls(ptr %words, i64 %pos0, i64 %ncalls) {{
entry:
  %any = icmp sgt i64 %ncalls, 0
  br i1 %any, label %call, label %end
call:
  %c = phi i64 [ 0, %entry ], [ %c1, %callcase_after ]
  %pos = phi i64 [ %pos0, %entry ], [ %pos1, %callcase_after ]
  %fp = getelementptr i64, ptr %words, i64 %pos
  %fn = load i64, ptr %fp, align 8
  %f = inttoptr i64 %fn to ptr
  %npos = add i64 %pos, 1
  %np = getelementptr i64, ptr %words, i64 %npos
  %n = load i64, ptr %np, align 8
  %base = add i64 %pos, 2
  {switch}
{blocks}
callcase_after:
  %pos1 = add i64 %base, %n
  %c1 = add i64 %c, 1
  %more = icmp slt i64 %c1, %ncalls
  br i1 %more, label %call, label %end
end:
  ret void
}}

define void @fast_chunk(ptr %board, i64 %core, i64 %cores) {{
entry:
  %fp = getelementptr i64, ptr %board, i64 {CALL}
  %fn = load i64, ptr %fp, align 8
  %f = inttoptr i64 %fn to ptr
  %cp = getelementptr i64, ptr %board, i64 {COUNT}
  %count = load i64, ptr %cp, align 8
  {chunk_switch}
{chunk_blocks}
chunkcase_after:
  ret void
}}
"""


def _claim_ir() -> str:
    """`fast_claim(board)`: claim and run tasks until none is left; returns how many it ran."""
    return f"""
define i64 @fast_claim(ptr %board) {{
entry:
  %donep = getelementptr i64, ptr %board, i64 {DONE}
  %modep = getelementptr i64, ptr %board, i64 {MODE}
  br label %look
look:
  %ran = phi i64 [ 0, %entry ], [ %ran, %look_again ], [ %ran1, %finish ]
  %w = load atomic i64, ptr %board acquire, align 8
  %tasks_hi = lshr i64 %w, 16
  %tasks = and i64 %tasks_hi, 65535
  %next = and i64 %w, 65535
  %open = icmp ult i64 %next, %tasks
  br i1 %open, label %try, label %out
try:
  %w1 = add i64 %w, 1
  %pair = cmpxchg ptr %board, i64 %w, i64 %w1 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %ok, label %run, label %look_again
look_again:
  br label %look
run:
  %mode = load i64, ptr %modep, align 8
  %chunks = icmp eq i64 %mode, {CHUNKS}
  br i1 %chunks, label %chunk, label %batch
chunk:
  call void @fast_chunk(ptr %board, i64 %next, i64 %tasks)
  br label %finish
batch:
  %slot = add i64 %next, {TABLE}
  %op = getelementptr i64, ptr %board, i64 %slot
  %offset = load i64, ptr %op, align 8
  %ncp = getelementptr i64, ptr %board, i64 %offset
  %ncalls = load i64, ptr %ncp, align 8
  %first = add i64 %offset, 1
  call void @fast_calls(ptr %board, i64 %first, i64 %ncalls)
  br label %finish
finish:
  %old = atomicrmw add ptr %donep, i64 1 acq_rel
  %ran1 = add i64 %ran, 1
  br label %look
out:
  ret i64 %ran
}}
"""


def _poll(name: str, operand: str, test: str) -> str:
    """`name(p, operand, limit)`: poll the int64 at `p` (acquire loads, `fast_relax` between polls)
    until `test` of the loaded `%v` holds or `limit` polls have passed; returns the word's value."""
    return f"""define i64 @{name}(ptr %p, i64 {operand}, i64 %limit) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %again ]
  %v = load atomic i64, ptr %p acquire, align 8
  %stop = {test}
  br i1 %stop, label %done, label %again
again:
  call void @fast_relax(i64 %i)
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %limit
  br i1 %more, label %loop, label %done
done:
  %r = load atomic i64, ptr %p acquire, align 8
  ret i64 %r
}}
"""


def _program_ir() -> str:
    """`fast_program(board, words, nsteps, wait_polls)`: run a sequence of kernels (runtime/sequence.py)
    on the caller, posting each threaded step's chunks on `board` for the crew; returns the board's
    last generation. A step is `chunks, function, count, arguments...`: chunks 0 calls the function
    as listed, 1 calls it with `core, cores` = `0, 1`, more posts that many chunks, claims with the
    workers and waits for the chunks they claimed (polling `wait_polls`, then napping
    `fast_nap`: 50 µs doubling to 250 µs, one poll between naps)."""
    return f"""
define void @fast_nap(i64 %us) {{
  %f = load ptr, ptr @nap_fn, align 8
  %u = trunc i64 %us to i32
  %r = call i32 %f(i32 %u)
  ret void
}}

define i64 @fast_program(ptr %board, ptr %words, i64 %nsteps, i64 %wait_polls) {{
entry:
  %w0 = load atomic i64, ptr %board acquire, align 8
  %g0 = lshr i64 %w0, 32
  %donep = getelementptr i64, ptr %board, i64 {DONE}
  %callp = getelementptr i64, ptr %board, i64 {CALL}
  %countp = getelementptr i64, ptr %board, i64 {COUNT}
  %modep = getelementptr i64, ptr %board, i64 {MODE}
  %argsp = getelementptr i64, ptr %board, i64 {ARGS}
  %any = icmp sgt i64 %nsteps, 0
  br i1 %any, label %step, label %end
step:
  %s = phi i64 [ 0, %entry ], [ %s1, %next ]
  %pos = phi i64 [ 0, %entry ], [ %pos1, %next ]
  %gen = phi i64 [ %g0, %entry ], [ %gen1, %next ]
  %kp = getelementptr i64, ptr %words, i64 %pos
  %k = load i64, ptr %kp, align 8
  %fnpos = add i64 %pos, 1
  %cntpos = add i64 %pos, 2
  %cp = getelementptr i64, ptr %words, i64 %cntpos
  %count = load i64, ptr %cp, align 8
  %argpos = add i64 %pos, 3
  %pos1 = add i64 %argpos, %count
  %plain = icmp eq i64 %k, 0
  br i1 %plain, label %direct, label %threaded
direct:
  call void @fast_calls(ptr %words, i64 %fnpos, i64 1)
  br label %next
threaded:
  %fnp = getelementptr i64, ptr %words, i64 %fnpos
  %fn = load i64, ptr %fnp, align 8
  store i64 %fn, ptr %callp, align 8
  store i64 %count, ptr %countp, align 8
  store i64 {CHUNKS}, ptr %modep, align 8
  %src = getelementptr i64, ptr %words, i64 %argpos
  %bytes = mul i64 %count, 8
  call void @llvm.memcpy.p0.p0.i64(ptr %argsp, ptr %src, i64 %bytes, i1 false)
  %single = icmp eq i64 %k, 1
  br i1 %single, label %alone, label %shared
alone:
  call void @fast_chunk(ptr %board, i64 0, i64 1)
  br label %next
shared:
  %ga = add i64 %gen, 1
  %gb = and i64 %ga, 2147483647
  store i64 0, ptr %donep, align 8
  %hi = shl i64 %gb, 32
  %kk = shl i64 %k, 16
  %word = or i64 %hi, %kk
  store atomic i64 %word, ptr %board release, align 8
  %ran = call i64 @fast_claim(ptr %board)
  br label %wait
wait:
  %nap = phi i64 [ 50, %shared ], [ %nap2, %sleep ]
  %limit = phi i64 [ %wait_polls, %shared ], [ 1, %sleep ]
  %v = call i64 @fast_wait_count(ptr %donep, i64 %k, i64 %limit)
  %ok = icmp sge i64 %v, %k
  br i1 %ok, label %next, label %sleep
sleep:
  call void @fast_nap(i64 %nap)
  %nap1 = shl i64 %nap, 1
  %big = icmp sgt i64 %nap1, 250
  %nap2 = select i1 %big, i64 250, i64 %nap1
  br label %wait
next:
  %gen1 = phi i64 [ %gen, %direct ], [ %gen, %alone ], [ %gb, %wait ]
  %s1 = add i64 %s, 1
  %more = icmp slt i64 %s1, %nsteps
  br i1 %more, label %step, label %end
end:
  %last = phi i64 [ %g0, %entry ], [ %gen1, %next ]
  ret i64 %last
}}
"""


def _ir(pause: str, declare: str) -> str:
    """The module: `fast_init` (sched_yield's and usleep's addresses), `fast_relax` (one poll's pause),
    `fast_spin` (poll a word), `fast_wait_count` (poll a counter), `fast_publish` (release store),
    the calling loops, `fast_claim`, `fast_program` (a kernel sequence on the caller), and
    `fast_serve` (a worker's loop: claim board tasks, return on a Python job or after `limit` polls
    without work)."""
    return f"""
{declare}
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
@yield_fn = internal global ptr null
@nap_fn = internal global ptr null

define void @fast_init(ptr %y, ptr %n) {{
  store ptr %y, ptr @yield_fn, align 8
  store ptr %n, ptr @nap_fn, align 8
  ret void
}}

define void @fast_relax(i64 %i) {{
entry:
  {pause}
  %m = and i64 %i, {YIELD_EVERY - 1}
  %now = icmp eq i64 %m, {YIELD_EVERY - 1}
  br i1 %now, label %give, label %done
give:
  %f = load ptr, ptr @yield_fn, align 8
  %r = call i32 %f()
  br label %done
done:
  ret void
}}

{_poll('fast_spin', '%old', 'icmp ne i64 %v, %old')}
{_poll('fast_wait_count', '%target', 'icmp sge i64 %v, %target')}
define void @fast_publish(ptr %p, i64 %value) {{
  store atomic i64 %value, ptr %p release, align 8
  ret void
}}
{_calls_ir()}
{_claim_ir()}
{_program_ir()}
define i64 @fast_serve(ptr %job, ptr %board, i64 %seen, i64 %first, i64 %idle) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %relax ], [ 0, %claim ]
  %limit = phi i64 [ %first, %entry ], [ %limit, %relax ], [ %idle, %claim ]
  %w = load atomic i64, ptr %board acquire, align 8
  %tasks_hi = lshr i64 %w, 16
  %tasks = and i64 %tasks_hi, 65535
  %nx = and i64 %w, 65535
  %open = icmp ult i64 %nx, %tasks
  br i1 %open, label %claim, label %own
claim:
  %ran = call i64 @fast_claim(ptr %board)
  br label %loop
own:
  %v = load atomic i64, ptr %job acquire, align 8
  %changed = icmp ne i64 %v, %seen
  br i1 %changed, label %handback, label %relax
handback:
  ret i64 %v
relax:
  call void @fast_relax(i64 %i)
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %limit
  br i1 %more, label %loop, label %quiet
quiet:
  ret i64 %seen
}}
"""
