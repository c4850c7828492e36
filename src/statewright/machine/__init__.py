"""The pure core: events, commands, state and the task reducer."""
