"""Training: state, the paper's optimizer, pure steps, the mesh/pmap runners, evaluation, and the train-and-evaluate
loop."""
