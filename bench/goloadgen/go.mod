module nimbix-burst/bench/goloadgen

go 1.22
