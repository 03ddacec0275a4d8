"""kanal.commands: what every `kanal` command shares, whatever side of the project runs it.

    report          how a command ends: exit statuses and the one-line (or JSON) error
    command_config  client security flags and --command-config files
    dev_state       $KANAL_HOME and how commands find a running `kanal dev`
    record_text     record bytes shown to people and written as JSON (consume, dump-log)

Imports kanal.v1, kanal.net and kanal.security.
"""
