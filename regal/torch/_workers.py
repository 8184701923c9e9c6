"""The worker side of `regal.torch.dist`: what the generated device programs call (send,
receive, wait, rebuild a tensor over received bytes), and the processes that run them.

Private: `regal.torch.dist` builds the programs and calls `launch`. The functions the programs
call are module-level so that FX's generated code and pickling find them by name.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import tempfile
import time
import traceback

import torch
import torch.fx

from regal.torch.plan import measure_peak

def _at(value, path):
    for i in path:
        value = value[i]
    return value


def _bytes_view(t: torch.Tensor) -> torch.Tensor:
    """A uint8 tensor over all of `t`'s storage."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def recv_copy(nbytes: int, src: int, tag: int, device: str):
    import torch.distributed as dist
    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dist.recv(buf, src, tag=tag)
    return buf


def recv_into(value, path, src: int, tag: int):
    import torch.distributed as dist
    dist.recv(_bytes_view(_at(value, path)), src, tag=tag)


def isend_copy(value, path, dst: int, tag: int):
    import torch.distributed as dist
    buf = _bytes_view(_at(value, path))
    return dist.isend(buf, dst, tag=tag), buf


def wait_send(handle):
    handle[0].wait()


def rebuild(layout, sources):
    """A value as `layout` describes it over the storages of `sources` (module docstring)."""
    tag = layout[0]
    if tag == "C":
        return layout[1]
    if tag == "S":
        vals = [rebuild(x, sources) for x in layout[1]]
        return vals if layout[2] else tuple(vals)
    _, i, path, dtype, size, stride, offset = layout
    src = _at(sources[i], path)
    return torch.empty(0, dtype=dtype, device=src.device).set_(src.untyped_storage(), offset, size, stride)


class _Source:
    """A device program as its Python source, picklable for a worker that did not build it
    (a GraphModule unpickles by re-tracing its code, which would run the sends and receives)."""

    def __init__(self, gm: torch.fx.GraphModule):
        code = gm.graph.python_code(root_module="self")
        self.src = code.src
        self.globals = {k: ("module", v.__name__) if isinstance(v, type(torch)) else ("value", v)
                        for k, v in code.globals.items()}
        self.attrs = {str(n.target): _get_attr(gm, str(n.target)) for n in gm.graph.nodes if n.op == "get_attr"}
        self._forward = None

    def __getstate__(self):
        return {**self.__dict__, "_forward": None}

    def __call__(self, *args):
        if self._forward is None:
            env = {k: importlib.import_module(v) if kind == "module" else v for k, (kind, v) in self.globals.items()}
            exec(compile(self.src, "<regal device program>", "exec"), env)  # noqa: S102 - our own FX code
            self._forward = env["forward"]
        return self._forward(_Attrs(self.attrs), *args)


class _Attrs:
    """`self` of a program: its get_attr tensors by dotted name."""

    def __init__(self, attrs: dict):
        for name, value in attrs.items():
            obj, (*path, last) = self, name.split(".")
            for part in path:
                if not hasattr(obj, part):
                    setattr(obj, part, _Attrs({}))
                obj = getattr(obj, part)
            setattr(obj, last, value)


def _get_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _worker(rank: int, d: int, store: str, backend: str, device_type: str, threads: int,
            program, args_file: str, result: str) -> None:
    import torch.distributed as dist
    try:
        args = torch.load(args_file, weights_only=False)
        torch.set_num_threads(threads)
        device = "cpu"
        if device_type == "cuda":
            device = f"cuda:{rank % torch.cuda.device_count()}"
            torch.cuda.set_device(device)
        dist.init_process_group(backend, store=dist.FileStore(store, d), rank=rank, world_size=d)
        got = measure_peak(program, args, device)
        dist.barrier()
        dist.destroy_process_group()
        cpu = lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x  # noqa: E731
        torch.save({"peak": got.peak_bytes, "reserved": got.reserved_bytes,
                    "outputs": {n: torch.utils._pytree.tree_map(cpu, v) for n, v in got.outputs.items()},
                    "args": [cpu(a) for a in got.args]}, result)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        with open(result + ".err", "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)


def launch(programs, args: list, backend: str, device_type: str, timeout_s: float,
           start_method: str | None) -> list[dict]:
    """Run `programs[r]` (FX GraphModules) on `args[r]` in process r; each process's result dict."""
    if start_method is None:   # not fork: a child of a process that ran OpenMP ops hangs in its first
        methods = multiprocessing.get_all_start_methods()
        start_method = "forkserver" if device_type == "cpu" and "forkserver" in methods else "spawn"
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        # the profiler imports torch._inductor on its first start (seconds): once, in the server
        ctx.set_forkserver_preload(["torch", "torch.distributed", "torch.profiler", "torch._inductor.config",
                                    "regal.torch._workers"])
    d = len(programs)
    with tempfile.TemporaryDirectory(prefix="regal_dist_") as tmp:
        results = [os.path.join(tmp, f"rank{r}.pt") for r in range(d)]
        inputs = [os.path.join(tmp, f"args{r}.pt") for r in range(d)]
        for r in range(d):  # through a file: handing hundreds of tensors to a forkserver child
            torch.save(list(args[r]), inputs[r])  # passes a descriptor each ("too many fds")
        procs = [ctx.Process(target=_worker, daemon=True,
                             args=(r, d, os.path.join(tmp, "store"), backend, device_type, torch.get_num_threads(),
                                   _Source(programs[r]), inputs[r], results[r]))
                 for r in range(d)]
        for p in procs:
            p.start()
        _join(procs, results, timeout_s)
        return [torch.load(f, weights_only=False) for f in results]


def _join(procs, results, timeout_s: float) -> None:
    """Wait for every worker; on a failure or past `timeout_s` stop them all and raise."""
    end = time.monotonic() + timeout_s
    try:
        while any(p.is_alive() for p in procs):
            bad = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if bad:
                err = results[bad[0]] + ".err"
                msg = open(err).read() if os.path.exists(err) else f"exit code {procs[bad[0]].exitcode}"
                raise RuntimeError(f"run_placed: device {bad[0]} failed:\n{msg}")
            if time.monotonic() > end:
                raise TimeoutError(f"run_placed: the devices did not finish in {timeout_s:g} s")
            time.sleep(0.01)
        bad = [r for r, p in enumerate(procs) if p.exitcode != 0]
        if bad:
            err = results[bad[0]] + ".err"
            msg = open(err).read() if os.path.exists(err) else f"exit code {procs[bad[0]].exitcode}"
            raise RuntimeError(f"run_placed: device {bad[0]} failed:\n{msg}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
