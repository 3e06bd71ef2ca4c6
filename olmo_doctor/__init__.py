"""olmo-doctor: probe a machine, judge it against a rules database of documented failures, fix what can be
fixed, build flash-attn/xformers for exactly this GPU, and hand over to the bundled OLMo trainer."""

__version__ = "0.1.0"
