"""gptstack.tokenizer"""
