"""The trainer's data: BOOST's corpora and tokenizer (``boost.data``) registered with torchtitan's dataloader."""
