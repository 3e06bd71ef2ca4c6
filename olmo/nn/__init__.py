"""The network's parts below the model: attention kernels by name (attention.py, attention_flex.py), picking
one for `attn_backend: auto` (attention_choice.py), the projection layer (linear.py) and the chunked loss
(loss.py). The model itself is olmo/model.py."""
