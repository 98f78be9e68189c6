module github.com/serhii-samoilenko/pod-startup-lock/init

go 1.21
