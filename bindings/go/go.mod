module kcsi.dev/kcsi

go 1.24
