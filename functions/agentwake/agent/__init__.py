"""The agent runtime: runner, provider chain, providers and tools. No AWS imports here."""
