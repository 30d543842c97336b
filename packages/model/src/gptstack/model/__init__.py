"""gptstack.model"""
