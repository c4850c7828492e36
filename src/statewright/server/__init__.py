"""The HTTP side of statewright (the ``[web]`` extra): Starlette routes over the engine."""
