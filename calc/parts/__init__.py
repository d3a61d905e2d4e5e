"""The parts models are made of, each as PyTorch's eager autograd runs it: the op library (ops: elementwise,
linear, norms, attention) and the blocks composed of ops (mlp, experts). The families (calc.families) compose
their layers from these."""
