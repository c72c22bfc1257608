module sbx/agent

go 1.22
