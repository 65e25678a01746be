module weft.bench/echo

go 1.22
