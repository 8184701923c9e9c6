"""The `regal` commands, one module per group of them (`regal.cli` registers each on its group
`main`): graphs (info, import-hlo, import-onnx), optimize, solve, evaluate (evaluate, plot), train;
`report` holds the solution reports optimize and solve share. They import `regal.cli_common`
(and `regal.cli_pack`), never `regal.cli`."""
