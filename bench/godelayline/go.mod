module nimbix-burst/bench/godelayline

go 1.22
