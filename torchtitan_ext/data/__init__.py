"""The trainer's data: BOOST's corpora and tokenizer (``boost.training.data``) registered with
torchtitan's dataloader."""
