"""The optimizer: AdamW with OLMo's parameter groups and the learning-rate schedule (optimizer.py), and bf16
compute copies kept by the optimizer (mixed_precision.py, with its one-pass AdamW in fused_adamw.py)."""
