"""``python -m mcore_images.smoke.attention``: every attention backend the image offers, forward and backward,
against an fp32 reference.

A training run whose attention is wrong still runs and its loss still falls, so only a reference sees it. For each
``attention_backend`` megatron-core can be given (the NVTE variables it sets, catalogue.flash_attention), TE's
DotProductAttention picks a backend (FlashAttention, cuDNN fused, unfused) or none; megatron-core's own attention
(``local``) and FlashAttention 4 called directly run beside them. Each runs the cases verl and Megatron-LM use
(sbhd, bshd, thd packed with cu_seqlens; MHA and GQA; causal; head dims 64 and 128) and is judged against the fp32
reference with the tolerance of kit.numerics.attention. The smoke's launcher runs it after the training runs and
adds its table to the certificate; the doctor's te.attention runs its ``--probe`` case as a child process.

- cases.py (pure): the cases and the backends;
- table.py (pure): results → the certificate's section, its verdict and its Markdown;
- compute.py: the tensors (torch, TE, megatron-core; imported only when the check runs);
- cli.py: the command line; ``python -m mcore_images.smoke.attention.merge`` joins the tables of several
  environments into one (the GPU script's pairs).
"""
