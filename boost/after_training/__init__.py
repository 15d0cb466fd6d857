"""After training: a finished run read back, sampled, scored and exported to Hugging Face.

- ``trained_run``: a run's TOML, newest intact DCP checkpoint and tokenizer, built into a model;
- ``job_defaults``: torchtitan's defaults for the TOML fields these tools read, where the TOML omits them;
- ``generate``: sampling with a KV cache, TP under torchrun (``python -m boost.after_training.generate``);
- ``evaluate``: perplexity and bits per byte (``python -m boost.after_training.evaluate``);
- ``lm_eval_local``: lm-evaluation-harness on an exported folder and a local file (optional);
- ``hf_folder``: exported folders: names, RoPE order, config, remote code, tokenizer;
- ``interop/``: Hugging Face LLaMA checkpoints in and out (``python -m boost.after_training.interop``);
- ``hf/``: the remote code copied into every exported folder (torch and transformers only).

It imports the training library and the runtime helpers, never planning.
"""
