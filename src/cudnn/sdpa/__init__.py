"""``cudnn.sdpa``: scaled dot-product attention as torch ops, in the official package's layout:
``cudnn.sdpa.fwd.torch_op.sdpa`` (also ``cudnn.sdpa_torch``) and the ops ``cudnn::sdpa_fwd`` /
``cudnn::sdpa_bwd`` it registers. Importing this package imports nothing else."""
