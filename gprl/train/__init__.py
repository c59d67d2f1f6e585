"""The training app behind train.py: tasks, the run loop, checkpoints, tracking, torchrun."""
