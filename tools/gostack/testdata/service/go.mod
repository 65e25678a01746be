module weft.example/gostack/service

go 1.18
