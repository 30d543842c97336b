"""gptstack.bench"""
