"""Django app for rocketbox.

Will hold the AppConfig, ``settings.ROCKETBOX``, the ``@transactional_message``
decorator, management commands and system checks.
"""
