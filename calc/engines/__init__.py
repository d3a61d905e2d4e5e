"""The engines that run one training step over many processes, one module each, saying what a rank holds
beyond the one-device step (issue 31). The eager walk (calc.eager_step) asks the engine; the deck walk keeps
the papers' accounting (calc.parallel).

- ddp: torch's DistributedDataParallel, alone (ZeRO 0) or with ZeroRedundancyOptimizer (ZeRO 1).
- fsdp: torch's FSDP2, fully_shard on each decoder layer and on the model, reshard_after_forward False (ZeRO 2)
  or True (ZeRO 3).
- tensor: tensor parallelism over the decoder layers' linears (torch's "layers" plan), or transformers' own plan,
  which splits the embedding and head by vocabulary too.
- pipeline: one rank of torch.distributed.pipelining: a stage under Schedule1F1B or ScheduleGPipe, two under
  ScheduleInterleaved1F1B.
"""
