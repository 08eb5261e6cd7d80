"""The client's logic, written once as generators of effects (see effects.py)
and run by the blocking driver (_sync.py) or the asyncio one (_async.py)."""
