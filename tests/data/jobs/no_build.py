"""A job file that forgot its build function."""

VALUE = 1
