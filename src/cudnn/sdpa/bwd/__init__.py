"""``cudnn.sdpa.bwd``: the attention backward, ``cudnn::sdpa_bwd``, registered with the forward
by ``cudnn.sdpa.fwd.torch_op``."""
