"""The `regal` commands, one module per group of them (`regal.cli` registers each on its group
`main`): graphs (info, import-hlo, import-onnx), optimize, solve, evaluate (evaluate, plot),
train, pack (pack, fit), torch; `program` is the group itself (start-up, signals, exit). Their
helpers are theirs: `_common` (options, exit statuses, the command's deadline, loading a graph
under it, the packed arena a report prints) and `_report` (the solution reports optimize, solve
and evaluate share). A command imports those, never another command nor `regal.cli`."""
