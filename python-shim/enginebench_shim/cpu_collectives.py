"""What a MoE data-parallel group needs on vLLM's CPU platform that vLLM
0.32 lacks, supplied by the shim (issue 43): the `all_gatherv` and
`reduce_scatterv` collectives of the CPU communicator, and expert
parallelism in the CPU MoE experts.

What vLLM 0.32 calls on CPU (read from its source, then run: a `-dp 2`
group of the tiny MoE stops at the first forward without these):
  * a MoE layer with DP > 1 takes the naive DP/EP path
    (prepare_finalize/naive_dp_ep.py `prepare`/`finalize`, and
    `MoERunner._maybe_dispatch`/`_maybe_combine`): the EP group's
    `dispatch`/`dispatch_router_logits`/`combine`, which on CPU go to
    `AgRsAll2AllManager` (cpu_communicator.py: "Using allgather_reducescatter
    all2all manager"). It calls the DP group's `all_gatherv(tensors, dim=0,
    sizes)` to dispatch and `reduce_scatterv(hidden, dim=0, sizes)` to
    combine (device_communicators/all2all.py), `sizes` being each DP rank's
    tokens in this forward (`DPMetadata`, dummy batches included).
    `CpuCommunicator` inherits both from `DeviceCommunicatorBase`, where they
    raise `NotImplementedError`: vLLM issue #57837; PR #47778 (open) adds
    shared-memory versions for CPU.
  * with `--enable-expert-parallel` each rank holds `E / EP` experts and the
    router's top-k ids are global; `CPUUnquantizedExperts.apply`
    (experts/cpu_moe.py) passes them to `cpu_fused_moe` without reading its
    `expert_map` argument, and the kernel indexes past the local experts
    (a segfault in csrc/cpu/cpu_fused_moe.cpp, seen here). GPU kernels map
    ids through `expert_map` (global -> local, -1 when the expert lives on
    another rank) and skip the others.

Supplied here, in our own code:
  * all_gatherv: each rank pads its rows (dim 0) to the largest rank's
    count, `all_gather`s over the group's torch.distributed process group
    (gloo on CPU) and keeps each rank's first `sizes[r]` rows, concatenated
    in rank order; a list of tensors gives a list (as vLLM's other
    communicators);
  * reduce_scatterv: `all_reduce` (sum) of the whole tensor, then this rank's
    rows `sum(sizes[:rank]) .. + sizes[rank]` along `dim`;
  * expert_map: top-k ids mapped to local ids through `expert_map`, the
    weights of experts on other ranks set to 0 (their contribution comes
    from the rank that holds them, summed by `reduce_scatterv`).
Both collectives move more bytes than real v-collectives (padding; the whole
tensor reduced everywhere): right, and fine for tests and small CPU groups.

Each is supplied only where this vLLM lacks it: the platform is CPU, the
communicator's method is still the base class's, and the experts' `apply`
never reads `expert_map`; a vLLM that has its own keeps it. The model runs in
worker processes vLLM spawns (a DP rank on CPU uses the multiprocessing
executor), so the shim also installs this module as a vLLM general plugin
(entry-point group `vllm.general_plugins`, which vLLM loads in every worker,
v1/worker/worker_base.py): a folder with the module and its dist-info on
`sys.path`, which spawned children inherit. The result records what was
supplied (`engine.cpu_collectives`, `engine.cpu_expert_map`).
"""

import os
import sys

#: The plugin's name (vLLM's `VLLM_PLUGINS` lists plugins by it).
PLUGIN_NAME = "enginebench_cpu_collectives"
#: The module name the plugin folder holds.
MODULE_NAME = "enginebench_cpu_collectives"


def _padded_gather(comm, t, sizes):
    """One tensor of every rank, concatenated along dim 0 in rank order."""
    import torch
    import torch.distributed as dist

    largest = max(sizes)
    mine = sizes[comm.rank_in_group]
    if t.shape[0] != mine:
        raise ValueError(f"all_gatherv: this rank has {t.shape[0]} rows, sizes[{comm.rank_in_group}] = {mine}")
    padded = t.new_zeros((largest,) + tuple(t.shape[1:]))
    padded[:mine].copy_(t)
    gathered = [torch.empty_like(padded) for _ in range(comm.world_size)]
    dist.all_gather(gathered, padded, group=comm.device_group)
    return torch.cat([g[:n] for g, n in zip(gathered, sizes)], dim=0)


def all_gatherv(self, input_, dim=0, sizes=None):
    """vLLM's `all_gatherv(input_, dim, sizes)`: a tensor or a list of
    tensors, each `(sizes[rank], ...)` on this rank, gathered along dim 0
    into `(sum(sizes), ...)` in rank order (sizes None: equal sizes).
    Only dim 0, as vLLM's XPU version and every MoE caller."""
    if dim != 0:
        raise NotImplementedError("all_gatherv: only dim 0 (as vLLM's MoE callers use it)")
    tensors = input_ if isinstance(input_, (list, tuple)) else [input_]
    out = []
    for t in tensors:
        s = list(sizes) if sizes is not None else [t.shape[0]] * self.world_size
        if len(s) != self.world_size:
            raise ValueError(f"all_gatherv: {len(s)} sizes for a group of {self.world_size}")
        out.append(_padded_gather(self, t, s))
    return out if isinstance(input_, (list, tuple)) else out[0]


def reduce_scatterv(self, input_, dim=-1, sizes=None):
    """vLLM's `reduce_scatterv(input_, dim, sizes)`: the sum over ranks of
    `input_` (`sum(sizes)` rows along `dim`), of which this rank keeps its
    `sizes[rank]` rows (sizes None: equal chunks)."""
    import torch.distributed as dist

    if dim < 0:
        dim += input_.dim()
    t = input_.movedim(dim, 0).contiguous().clone()
    n = t.shape[0]
    s = list(sizes) if sizes is not None else [n // self.world_size] * self.world_size
    if len(s) != self.world_size or sum(s) != n:
        raise ValueError(f"reduce_scatterv: sizes {s} do not split {n} rows over {self.world_size} ranks")
    dist.all_reduce(t, group=self.device_group)
    start = sum(s[: self.rank_in_group])
    return t[start:start + s[self.rank_in_group]].movedim(0, dim).contiguous()


def _reads(fn, name):
    """Whether function `fn`'s code ever reads its local `name`."""
    import dis

    for ins in dis.get_instructions(fn):
        if ins.opname.startswith("LOAD_FAST"):
            arg = ins.argval
            if arg == name or (isinstance(arg, tuple) and name in arg):
                return True
    return False


def _with_expert_map(apply):
    """`apply` of a CPU experts class, taking vLLM's `expert_map` into
    account: global top-k ids become local ids, experts of other ranks get
    weight 0."""
    import inspect

    sig = inspect.signature(apply)

    def apply_with_expert_map(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        expert_map = bound.arguments.get("expert_map")
        if expert_map is not None:
            ids = bound.arguments["topk_ids"]
            local = expert_map[ids.long()]
            elsewhere = local < 0
            bound.arguments["topk_weights"] = bound.arguments["topk_weights"].masked_fill(elsewhere, 0.0)
            bound.arguments["topk_ids"] = local.clamp(min=0).to(ids.dtype)
            bound.arguments["expert_map"] = None
        return apply(*bound.args, **bound.kwargs)

    apply_with_expert_map.__wrapped__ = apply
    return apply_with_expert_map


def install():
    """Supplies what this vLLM lacks for a MoE DP group on CPU, in this
    process. Returns {"collectives": names supplied (all_gatherv,
    reduce_scatterv), "expert_map": whether the CPU experts were given
    expert-parallel ids}, or None when the platform is not CPU or this vLLM
    keeps none of these where the shim looks. Idempotent."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return None
        from vllm.distributed.device_communicators.base_device_communicator import DeviceCommunicatorBase
        from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator
    except ImportError:
        return None
    supplied = []
    for name, fn in (("all_gatherv", all_gatherv), ("reduce_scatterv", reduce_scatterv)):
        mine = getattr(CpuCommunicator, name, None)
        if mine is fn:
            supplied.append(name)
        elif mine is None or mine is getattr(DeviceCommunicatorBase, name, None):
            setattr(CpuCommunicator, name, fn)
            supplied.append(name)
    expert_map = False
    try:
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:
        CPUUnquantizedExperts = None
    if CPUUnquantizedExperts is not None:
        apply = CPUUnquantizedExperts.apply
        if getattr(apply, "__wrapped__", None) is not None:
            expert_map = True
        elif not _reads(apply, "expert_map"):
            CPUUnquantizedExperts.apply = _with_expert_map(apply)
            expert_map = True
    return {"collectives": supplied, "expert_map": expert_map}


def _dp_group_size(environ):
    try:
        return int(str(environ.get("VLLM_DP_SIZE", "1")).strip())
    except ValueError:
        return 1


def plugin():
    """vLLM's general-plugin entry (every process vLLM starts, workers
    included): installs in a DP group's processes only."""
    if _dp_group_size(os.environ) > 1:
        install()


def _plugin_folder(source):
    """A folder holding this module as an installed distribution with a
    `vllm.general_plugins` entry point, written once per module text under
    the temp folder; returns its path."""
    import hashlib
    import shutil
    import tempfile

    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"enginebench-vllm-plugin-{digest}")
    if os.path.isfile(os.path.join(folder, MODULE_NAME + ".py")):
        return folder
    tmp = tempfile.mkdtemp(prefix="enginebench-vllm-plugin-", dir=tempfile.gettempdir())
    dist = os.path.join(tmp, f"{MODULE_NAME}-1.0.dist-info")
    os.makedirs(dist)
    with open(os.path.join(tmp, MODULE_NAME + ".py"), "w") as f:
        f.write(source)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {MODULE_NAME}\nVersion: 1.0\n")
    with open(os.path.join(dist, "entry_points.txt"), "w") as f:
        f.write(f"[vllm.general_plugins]\n{PLUGIN_NAME} = {MODULE_NAME}:plugin\n")
    try:
        os.rename(tmp, folder)
    except OSError:  # another process wrote it first: the same text
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _source():
    """This module's text: set by the worker module that embeds it
    (`SOURCE`), else read from the file."""
    text = globals().get("SOURCE")
    if text:
        return text
    with open(os.path.abspath(__file__)) as f:
        return f.read()


def enable(environ=None):
    """For a rank of a DP group (VLLM_DP_SIZE > 1) on CPU: supplies what is
    missing in this process and in every worker process vLLM will spawn
    (the plugin folder goes on `sys.path`, which spawned children receive;
    a `VLLM_PLUGINS` list gets the plugin's name). Returns what `install`
    returns (None: not CPU, or not a DP group)."""
    environ = os.environ if environ is None else environ
    if _dp_group_size(environ) <= 1:
        return None
    supplied = install()
    if supplied is None:
        return None
    folder = _plugin_folder(_source())
    if folder not in sys.path:
        sys.path.append(folder)
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        os.environ["VLLM_PLUGINS"] = ",".join(p for p in (allowed, PLUGIN_NAME) if p)
    return supplied
