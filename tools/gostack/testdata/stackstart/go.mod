module weft.example/gostack/stackstart

go 1.21
