"""Host reads of values fixed by host data (tests/python/test_values.py): printed as JSON.

Run with DEVICE=cpu by plain torch (the judge: torch computes the values) and with DEVICE=cuda
under `cachalot capture` (no kernel runs: the values come from the capture's CPU evaluation).
"""

import json
import os

import torch

dev = os.environ.get("DEVICE", "cuda")
mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]).to(dev)
out = {"all_ones": bool((mask == 1).all()), "right_pad": torch.any(mask[:, -1] == 0).item()}
pos = mask.long().cumsum(-1) - 1
pos.masked_fill_(mask == 0, 1)
out["position_ids"] = pos.tolist()
out["nonzero"] = torch.nonzero(mask == 0).tolist()
rows, cols = torch.where(mask == 0)
out["where"] = [rows.tolist(), cols.tolist()]
x = torch.arange(12, device=dev).reshape(3, 4)
out["bool_index"] = x[x % 3 == 0].tolist()
out["masked_select"] = torch.masked_select(x, x > 7).tolist()
ids = torch.tensor([3, 1, 3, 0, 2, 3], device=dev)
out["histogram"] = torch.bincount(ids, minlength=5).tolist()
out["one_hot_sum"] = torch.nn.functional.one_hot(ids, 4).sum(0).tolist()
out["sorted"] = torch.sort(ids, descending=True).values.tolist()
done = torch.full((3,), 7 >= 9, device=dev, dtype=torch.bool)
unfinished = torch.ones(3, dtype=torch.long, device=dev) & ~done
out["stop"] = bool(unfinished.max() == 0)
host = torch.zeros(3, dtype=torch.long)
host.copy_(mask.sum(-1))
out["copy_to_host"] = host.tolist()
out["float"] = float((x.float() / 4).mean())
table = torch.arange(40, device=dev).reshape(10, 4)
k = torch.tensor(7, device=dev)
out["scalar_index"] = table[k].tolist()
y = x.clone()
y[y > 5] = 0
out["setitem"] = y.tolist()
print("VALUES " + json.dumps(out, sort_keys=True))
