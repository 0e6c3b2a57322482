"""A small Hugging Face `Trainer` job for the multi-rank capture tests, started by torchrun:
a tiny random-init Llama (no weights downloaded), DDP over NCCL as Trainer sets it up, two
optimizer steps of AdamW on random tokens.

Each rank writes torch's own allocator statistics at its end to `STATS/rankR.json`, what the
test compares the capture's per-rank prediction with.

usage: torchrun --nproc_per_node 2 trainer_workload.py STATS OUTPUT_DIR"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    stats, output = sys.argv[1], sys.argv[2]
    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    args = TrainingArguments(
        output_dir=output,
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(32, 64, config.vocab_size))
    trainer.train()
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    rank = int(os.environ["RANK"])
    with open(os.path.join(stats, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "peak_allocated": s["allocated_bytes.all.peak"],
                "peak_reserved": s["reserved_bytes.all.peak"],
                "device": torch.cuda.current_device(),
                "world": torch.distributed.get_world_size(),
                "ddp": type(trainer.model_wrapped).__name__,
            },
            f,
        )


if __name__ == "__main__":
    main()
