"""Building kernels for exactly one machine: recipes (data) -> plan (pure) -> source -> executor -> cache ->
verify. `olmo_doctor.commands.build_kernels` wires these together for `olmo-doctor build-kernels`."""
