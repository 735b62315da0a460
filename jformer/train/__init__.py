"""Training: state, the paper's optimizer, pure steps, evaluation, and the train-and-evaluate loop."""
