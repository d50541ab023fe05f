"""A prelude for scripts run in a fresh interpreter: every way to open a network connection raises."""

NO_NETWORK = """
import socket

def refuse(*args, **kwargs):
    raise AssertionError(f"network or download attempted: {args!r}")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""
