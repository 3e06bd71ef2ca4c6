"""`olmo-doctor check --nccl`: an all-reduce over the visible GPUs through torchrun, its bus bandwidth judged
against what the link between the GPUs should carry, and hangs turned into findings."""
