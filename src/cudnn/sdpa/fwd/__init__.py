"""``cudnn.sdpa.fwd``: the attention forward; ``cudnn.sdpa.fwd.torch_op`` registers the torch ops."""
