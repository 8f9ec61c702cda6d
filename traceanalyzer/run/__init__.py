"""The run: each rank mapped to a compact rank result, the ranks combined into one Analysis, and the
executors that run the map (this process, local processes, a Dask cluster)."""
