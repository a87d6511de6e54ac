module nimbix-burst/bench/gowebhook

go 1.22
