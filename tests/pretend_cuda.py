"""Imported last by a test's worker server (tests/grader/test_grading_startup.py): from here on the server's grading.worker
believes a CUDA device is present, as on a GPU machine."""

import grading.worker

grading.worker.cuda_device_present = lambda environ=None: True
