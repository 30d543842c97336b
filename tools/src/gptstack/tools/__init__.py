"""gptstack.tools"""
