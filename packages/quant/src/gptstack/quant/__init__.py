"""gptstack.quant"""
