"""What keeps a run safe around torchtitan's trainer: one trainer per run folder, checkpoints checked
before they are loaded and recording the model they hold, and no non-finite update."""
