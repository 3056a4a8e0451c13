"""Stage-to-stage transport: the bridge between pipeline stages of different DP/TP degrees (Whale §3.2.3).

A sender ships row slices of a micro-batch to every rank that needs them; the receiver concatenates the
slices in replica order. Only the *row* count of a message is known in advance (from the Plan), so the first
message on each (peer, direction) carries a small header with the trailing shape and dtype, cached after.
Sends are asynchronous and completed at the end of the step; receives block, so the schedule's order alone
keeps the pipeline deadlock-free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32)
_HEADER = 8  # [dtype index, ndim, dims...]


@dataclass
class Transport:
    device: torch.device
    comm_s: float = 0.0  # time spent blocked in receives and send completion this step
    _sent_header: set[tuple[int, int]] = field(default_factory=set)
    _meta: dict[tuple[int, int], tuple[tuple[int, ...], torch.dtype]] = field(default_factory=dict)
    _pending: list[tuple[dist.Work, torch.Tensor]] = field(default_factory=list)

    def send(self, tensor: torch.Tensor, dst: int, tag: int, kind: int) -> None:
        tensor = tensor.detach().contiguous()
        key = (dst, kind)
        if key not in self._sent_header:
            self._sent_header.add(key)
            header = torch.zeros(_HEADER, dtype=torch.int64)
            header[0] = _DTYPES.index(tensor.dtype)
            header[1] = tensor.dim() - 1
            header[2 : 1 + tensor.dim()] = torch.tensor(tensor.shape[1:], dtype=torch.int64)
            self._pending.append((dist.isend(header.to(self.device), dst, tag=tag), header))
        self._pending.append((dist.isend(tensor, dst, tag=tag), tensor))

    def recv(self, rows: int, src: int, tag: int, kind: int) -> torch.Tensor:
        t0 = time.perf_counter()
        key = (src, kind)
        if key not in self._meta:
            header = torch.zeros(_HEADER, dtype=torch.int64, device=self.device)
            dist.recv(header, src, tag=tag)
            header = header.cpu()
            nd = int(header[1])
            self._meta[key] = (tuple(int(x) for x in header[2 : 2 + nd]), _DTYPES[int(header[0])])
        trailing, dtype = self._meta[key]
        out = torch.empty((rows, *trailing), dtype=dtype, device=self.device)
        dist.recv(out, src, tag=tag)
        self.comm_s += time.perf_counter() - t0
        return out

    def flush(self) -> None:
        t0 = time.perf_counter()
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()
        self.comm_s += time.perf_counter() - t0
