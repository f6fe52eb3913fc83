#!/bin/sh
# Stands in for a worker whose kernel hangs: takes the request and never answers.
sleep 30
